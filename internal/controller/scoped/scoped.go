// Package scoped holds the controller's caches scoped to the work: informers
// of one kind (pods) by field or label selector, each started by the first
// read that needs it and stopped when nothing needs it any more, so that the
// controller holds the pods of the nodes it drains (and the few others its
// decisions read), not every pod of the cluster.
//
// A read of a scope waits until its informer has listed the whole scope:
// a pass never plans with part of a node's pods.
package scoped

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Scope is what one informer watches: the objects of a namespace ("" every
// namespace) that match a field and a label selector (either may be empty).
type Scope struct {
	Namespace string
	Field     string
	Label     string
}

// Node is the scope of the pods bound to a node.
func Node(name string) Scope {
	return Scope{Field: fields.OneTermEqualSelector("spec.nodeName", name).String()}
}

// Pod is the scope of one pod.
func Pod(namespace, name string) Scope {
	return Scope{Namespace: namespace, Field: fields.OneTermEqualSelector("metadata.name", name).String()}
}

// Labelled is the scope of the objects that carry a label (any value).
func Labelled(key string) Scope { return Scope{Label: key} }

// Everything is the scope of every object of the kind: what an unscoped
// cache holds.
func Everything() Scope { return Scope{} }

// NodeOf says which node a Node scope is of.
func (s Scope) NodeOf() (string, bool) {
	if s.Namespace != "" || s.Label != "" {
		return "", false
	}
	sel, err := fields.ParseSelector(s.Field)
	if err != nil {
		return "", false
	}
	return sel.RequiresExactMatch("spec.nodeName")
}

func (s Scope) String() string {
	out := "namespace=" + s.Namespace
	if s.Namespace == "" {
		out = "all namespaces"
	}
	if s.Field != "" {
		out += " fields " + s.Field
	}
	if s.Label != "" {
		out += " labels " + s.Label
	}
	return out
}

// Options configure a Cache.
type Options struct {
	// Config and Resource say what is listed and watched: the REST client
	// of the kind's group version (rest.RESTClientFor) and its resource
	// ("pods").
	Client   rest.Interface
	Resource string
	// Transform slims objects before they are stored (the manager's).
	Transform toolscache.TransformFunc
	// Permanent scopes are watched from the start until the cache stops
	// (the pods vacate labels, which decisions read anywhere).
	Permanent []Scope
	// Keep says whether a scope that nothing read for Idle is still needed
	// (a node's drain is in progress): it is kept, else stopped. Nil stops
	// every idle scope.
	Keep func(Scope) bool
	// Idle is how long a scope that nothing reads is kept: default 1m.
	Idle  time.Duration
	Clock clock.PassiveClock
}

// DefaultIdle is how long a scope nothing reads is kept by default.
const DefaultIdle = time.Minute

// goneFor is how long the key of an object deleted while in scope is
// remembered: a read of it answers "gone" without asking the API server.
// Readers ask after a pod they saw (its eviction's outcome, its claim on a
// budget), by UID: another pod of the same name (a StatefulSet's, recreated
// on a node no scope holds) is not the one they mean. A scope that holds
// the new one answers with it.
const goneFor = 2 * time.Minute

// Cache is a set of informers of one kind, each of one scope. Its handlers
// (AddEventHandler) get the events of every scope, present and future: it
// is an informer (controller-runtime's cache.Informer) for a controller's
// watch.
type Cache[T client.Object] struct {
	opts    Options
	example T
	newList func() runtime.Object

	started chan struct{}
	ctx     context.Context

	mu       sync.Mutex
	scopes   map[Scope]*entry
	handlers []*registration
	gone     map[string]time.Time
}

// entry is one scope's informer.
type entry struct {
	scope     Scope
	informer  toolscache.SharedIndexInformer
	stop      context.CancelFunc
	lastRead  time.Time
	permanent bool
	// regs are the handlers' registrations on this informer.
	regs map[*registration]toolscache.ResourceEventHandlerRegistration
}

// New makes a cache of the kind of example (a pointer to an empty object),
// listed into lists made by newList.
func New[T client.Object](example T, newList func() runtime.Object, opts Options) *Cache[T] {
	if opts.Idle <= 0 {
		opts.Idle = DefaultIdle
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Cache[T]{opts: opts, example: example, newList: newList, started: make(chan struct{}),
		scopes: map[Scope]*entry{}, gone: map[string]time.Time{}}
}

// Start runs the permanent scopes, and stops idle scopes nothing needs,
// until ctx ends; then it stops every informer.
func (c *Cache[T]) Start(ctx context.Context) error {
	c.mu.Lock()
	c.ctx = ctx
	for _, s := range c.opts.Permanent {
		c.entryLocked(s).permanent = true
	}
	c.mu.Unlock()
	close(c.started)
	tick := time.NewTicker(max(c.opts.Idle/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			c.mu.Lock()
			for s, e := range c.scopes {
				e.stop()
				delete(c.scopes, s)
			}
			c.mu.Unlock()
			return nil
		case <-tick.C:
			c.sweep()
		}
	}
}

// KeepWhile sets Options.Keep; before Start.
func (c *Cache[T]) KeepWhile(keep func(Scope) bool) { c.opts.Keep = keep }

// NeedLeaderElection is false: the cache starts with the manager's, before
// the controllers that read it.
func (c *Cache[T]) NeedLeaderElection() bool { return false }

// sweep stops the scopes nothing read for Idle that Keep does not keep,
// and forgets old deletions.
func (c *Cache[T]) sweep() {
	now := c.opts.Clock.Now()
	c.mu.Lock()
	var idle []Scope
	for s, e := range c.scopes {
		if !e.permanent && now.Sub(e.lastRead) >= c.opts.Idle {
			idle = append(idle, s)
		}
	}
	for k, at := range c.gone {
		if now.Sub(at) >= goneFor {
			delete(c.gone, k)
		}
	}
	c.mu.Unlock()
	for _, s := range idle {
		// Keep reads other caches: not under c.mu.
		if c.opts.Keep != nil && c.opts.Keep(s) {
			continue
		}
		c.mu.Lock()
		if e := c.scopes[s]; e != nil && now.Sub(e.lastRead) >= c.opts.Idle {
			e.stop()
			delete(c.scopes, s)
		}
		c.mu.Unlock()
	}
}

// entryLocked is the scope's entry, its informer started if it is new.
// The caller holds c.mu, and Start has run.
func (c *Cache[T]) entryLocked(s Scope) *entry {
	if e := c.scopes[s]; e != nil {
		return e
	}
	lw := c.listWatch(s)
	inf := toolscache.NewSharedIndexInformerWithOptions(lw, c.example, toolscache.SharedIndexInformerOptions{
		ObjectDescription: c.opts.Resource + " (" + s.String() + ")"})
	if c.opts.Transform != nil {
		_ = inf.SetTransform(c.opts.Transform) // cannot fail before Run
	}
	e := &entry{scope: s, informer: inf, regs: map[*registration]toolscache.ResourceEventHandlerRegistration{}}
	// A delete from a scope by fields (a node's pods, one pod) is the
	// object's end: nodeName and name never change. From a scope by label
	// it may be only the label's removal (a replacement handed over to its
	// ReplicaSet loses vacate.dev/surge-of): the object may live on.
	gone := func(any) {}
	if s.Label == "" {
		gone = c.deleted
	}
	_, _ = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { c.seen(o) },
		DeleteFunc: gone,
	})
	for _, r := range c.handlers {
		if reg, err := inf.AddEventHandlerWithOptions(r.handler, r.options); err == nil {
			e.regs[r] = reg
		}
	}
	ctx, cancel := context.WithCancel(c.ctx)
	e.stop = cancel
	e.lastRead = c.opts.Clock.Now()
	c.scopes[s] = e
	go inf.RunWithContext(ctx)
	return e
}

// listWatch lists and watches the scope.
func (c *Cache[T]) listWatch(s Scope) toolscache.ListerWatcher {
	tweak := func(o *metav1.ListOptions) {
		o.FieldSelector, o.LabelSelector = s.Field, s.Label
	}
	return &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			tweak(&o)
			out := c.newList()
			err := c.opts.Client.Get().Namespace(s.Namespace).Resource(c.opts.Resource).
				VersionedParams(&o, metav1.ParameterCodec).Do(ctx).Into(out)
			return out, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			tweak(&o)
			o.Watch = true
			return c.opts.Client.Get().Namespace(s.Namespace).Resource(c.opts.Resource).
				VersionedParams(&o, metav1.ParameterCodec).Watch(ctx)
		},
	}
}

func (c *Cache[T]) seen(o any) {
	if k, err := toolscache.MetaNamespaceKeyFunc(o); err == nil {
		c.mu.Lock()
		delete(c.gone, k)
		c.mu.Unlock()
	}
}

func (c *Cache[T]) deleted(o any) {
	if k, err := toolscache.DeletionHandlingMetaNamespaceKeyFunc(o); err == nil {
		c.mu.Lock()
		c.gone[k] = c.opts.Clock.Now()
		c.mu.Unlock()
	}
}

// want is the scope's informer, started if needed, marked as read now.
func (c *Cache[T]) want(ctx context.Context, s Scope) (toolscache.SharedIndexInformer, error) {
	select {
	case <-c.started:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the %s cache to start: %w", c.opts.Resource, ctx.Err())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx.Err() != nil {
		return nil, fmt.Errorf("the %s cache has stopped", c.opts.Resource)
	}
	e := c.entryLocked(s)
	e.lastRead = c.opts.Clock.Now()
	return e.informer, nil
}

// Want starts the scope's informer if it is not running, and waits until
// it has listed the whole scope.
func (c *Cache[T]) Want(ctx context.Context, s Scope) error {
	inf, err := c.want(ctx, s)
	if err != nil {
		return err
	}
	select {
	case <-inf.HasSyncedChecker().Done():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the %s of %s to be listed: %w", c.opts.Resource, s, ctx.Err())
	}
}

// List is every object of the scope, once the scope is listed whole
// (Want). They are the cache's own objects, which the caller must not
// change.
func (c *Cache[T]) List(ctx context.Context, s Scope) ([]T, error) {
	if err := c.Want(ctx, s); err != nil {
		return nil, err
	}
	c.mu.Lock()
	e := c.scopes[s]
	c.mu.Unlock()
	if e == nil { // stopped meanwhile: read again
		return c.List(ctx, s)
	}
	objs := e.informer.GetStore().List()
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		if t, ok := o.(T); ok {
			out = append(out, t)
		}
	}
	return out, nil
}

// Lookup is what the cache knows of an object.
type Lookup int

const (
	// Unknown: no listed scope holds it, nor saw it go.
	Unknown Lookup = iota
	// Found: a scope holds it.
	Found
	// Gone: it was deleted while a scope held it.
	Gone
)

// Get looks the object up in every scope (namespace/name).
func (c *Cache[T]) Get(namespace, name string) (T, Lookup) {
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	var zero T
	c.mu.Lock()
	entries := make([]*entry, 0, len(c.scopes))
	for _, e := range c.scopes {
		entries = append(entries, e)
	}
	_, gone := c.gone[key]
	c.mu.Unlock()
	for _, e := range entries {
		if o, ok, err := e.informer.GetStore().GetByKey(key); err == nil && ok {
			if t, ok := o.(T); ok {
				return t, Found
			}
		}
	}
	if gone {
		return zero, Gone
	}
	return zero, Unknown
}

// Synced are the objects of every scope that has been listed whole, each
// once, that match the namespace ("" any) and the selector (nil any): what
// the cache holds, for a question about the work (which drained nodes have
// a PDB's pods). Scopes still listing are named in pending.
func (c *Cache[T]) Synced(namespace string, sel labels.Selector) (out []T, pending []Scope) {
	c.mu.Lock()
	entries := make([]*entry, 0, len(c.scopes))
	for _, e := range c.scopes {
		entries = append(entries, e)
	}
	c.mu.Unlock()
	seen := map[string]bool{}
	for _, e := range entries {
		if !e.informer.HasSynced() {
			pending = append(pending, e.scope)
			continue
		}
		for _, o := range e.informer.GetStore().List() {
			t, ok := o.(T)
			if !ok || (namespace != "" && t.GetNamespace() != namespace) || (sel != nil && !sel.Matches(labels.Set(t.GetLabels()))) {
				continue
			}
			if k := t.GetNamespace() + "/" + t.GetName(); !seen[k] {
				seen[k] = true
				out = append(out, t)
			}
		}
	}
	return out, pending
}

// Scopes are the scopes running now, sorted by their text, and the objects
// they hold (an object in two scopes counts twice).
func (c *Cache[T]) Scopes() (scopes []Scope, objects int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for s, e := range c.scopes {
		scopes = append(scopes, s)
		objects += len(e.informer.GetStore().ListKeys())
	}
	slices.SortFunc(scopes, func(a, b Scope) int {
		switch {
		case a.String() < b.String():
			return -1
		case a.String() > b.String():
			return 1
		}
		return 0
	})
	return scopes, objects
}
