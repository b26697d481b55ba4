package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/util/jsonpath"
)

// Output formats of -o, as kubectl's: the default table (""), wide, json,
// yaml, name, jsonpath=TEMPLATE and custom-columns=SPEC.
const (
	formatWide          = "wide"
	formatJSON          = "json"
	formatYAML          = "yaml"
	formatName          = "name"
	formatJSONPath      = "jsonpath"
	formatCustomColumns = "custom-columns"
)

// outputFormats are the values -o completes to.
var outputFormats = []string{formatWide, formatJSON, formatYAML, formatName, formatJSONPath + "=", formatCustomColumns + "="}

// outputUsage is -o's help.
const outputUsage = "output format: wide, json, yaml, name, jsonpath=TEMPLATE or custom-columns=NAME:.path,... (default: a table)"

// parseOutput splits -o's value into its format and argument (the
// template of jsonpath=, the spec of custom-columns=), refusing a format
// the command does not offer.
func parseOutput(value string, offered ...string) (format, arg string, err error) {
	format, arg, _ = strings.Cut(value, "=")
	switch {
	case value == "":
		return "", "", nil
	case !slices.Contains(offered, format):
		return "", "", argsError{fmt.Sprintf("-o %q: choose %s", value, strings.Join(offered, ", "))}
	case (format == formatJSONPath || format == formatCustomColumns) && arg == "":
		return "", "", argsError{fmt.Sprintf("-o %s needs a value: -o %s=...", format, format)}
	}
	return format, arg, nil
}

// objectPrinter is cli-runtime's printer of a format that prints objects
// (json, yaml, name, jsonpath), or ours of custom-columns; nil for the
// formats the command prints itself (the table, wide).
func objectPrinter(format, arg string) (printers.ResourcePrinter, error) {
	switch format {
	case formatJSON:
		return &printers.JSONPrinter{}, nil
	case formatYAML:
		return &printers.YAMLPrinter{}, nil
	case formatName:
		return &printers.NamePrinter{}, nil
	case formatJSONPath:
		p, err := printers.NewJSONPathPrinter(relaxedJSONPath(arg))
		if err != nil {
			return nil, argsError{fmt.Sprintf("-o jsonpath=%s: %v", arg, err)}
		}
		p.AllowMissingKeys(true)
		return p, nil
	case formatCustomColumns:
		return newCustomColumnsPrinter(arg)
	}
	return nil, nil
}

// relaxedJSONPath accepts what kubectl accepts: ".status.phase" as well as
// "{.status.phase}".
func relaxedJSONPath(expr string) string {
	if strings.Contains(expr, "{") {
		return expr
	}
	return "{" + expr + "}"
}

// customColumnsPrinter prints objects as a table of columns, each a JSONPath
// into the object (kubectl's custom-columns, on client-go's jsonpath).
type customColumnsPrinter struct {
	names   []string
	paths   []*jsonpath.JSONPath
	printed bool // the header
}

func newCustomColumnsPrinter(spec string) (*customColumnsPrinter, error) {
	p := &customColumnsPrinter{}
	for _, col := range strings.Split(spec, ",") {
		name, path, ok := strings.Cut(col, ":")
		if !ok || name == "" || path == "" {
			return nil, argsError{fmt.Sprintf("-o custom-columns=%s: %q is not NAME:.path", spec, col)}
		}
		jp := jsonpath.New(name).AllowMissingKeys(true)
		if err := jp.Parse(relaxedJSONPath(path)); err != nil {
			return nil, argsError{fmt.Sprintf("-o custom-columns: column %s: %v", name, err)}
		}
		p.names, p.paths = append(p.names, name), append(p.paths, jp)
	}
	return p, nil
}

// PrintObj prints a row per object (per item of a list), the header first.
func (p *customColumnsPrinter) PrintObj(obj runtime.Object, out io.Writer) error {
	w := printers.GetNewTabWriter(out)
	defer w.Flush()
	if !p.printed {
		fmt.Fprintln(w, strings.Join(p.names, "\t"))
		p.printed = true
	}
	items, err := itemsOf(obj)
	if err != nil {
		return err
	}
	for _, item := range items {
		cells := make([]string, len(p.paths))
		for i, jp := range p.paths {
			results, err := jp.FindResults(item)
			if err != nil {
				return err
			}
			var vals []string
			for _, r := range results {
				for _, v := range r {
					vals = append(vals, fmt.Sprint(v.Interface()))
				}
			}
			cells[i] = strings.Join(vals, ",")
			if cells[i] == "" {
				cells[i] = "<none>"
			}
		}
		fmt.Fprintln(w, strings.Join(cells, "\t"))
	}
	return nil
}

// itemsOf is an object as JSON data, or a list's items.
func itemsOf(obj runtime.Object) ([]any, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var data map[string]any
	if err := json.Unmarshal(b, &data); err != nil {
		return nil, err
	}
	if items, ok := data["items"].([]any); ok && strings.HasSuffix(fmt.Sprint(data["kind"]), "List") {
		return items, nil
	}
	return []any{data}, nil
}

// asObject is a value (a plan, an explanation) as an object for the
// printers: its JSON, with the apiVersion and kind they require, those of
// what it is about (a Node's plan, a NodeDrain's explanation), so that -o
// name names that.
func asObject(apiVersion, kind string, v any) (*unstructured.Unstructured, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(b, &u.Object); err != nil {
		return nil, err
	}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	return u, nil
}
