package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"golang.org/x/term"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/progress"
)

// redrawEvery is how often the live view redraws when nothing changes, so
// the clocks (elapsed, blocked for, ETA) move.
const redrawEvery = 500 * time.Millisecond

// terminal reports whether w is a terminal, and its width (0 if unknown).
func terminal(w io.Writer) (bool, func() int) {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return false, nil
	}
	return true, func() int {
		width, _, err := term.GetSize(int(f.Fd()))
		if err != nil {
			return 0
		}
		return width
	}
}

// follower shows the drains of some nodes until they end: a live view on a
// terminal, else one line per change.
type follower struct {
	out     io.Writer
	clock   clock.WithTicker
	tracker *progress.Tracker
	screen  *progress.Screen // nil: line output
	width   func() int
	lines   *progress.Lines
}

func newFollower(out io.Writer, clk clock.WithTicker, nodes []string) *follower {
	f := &follower{out: out, clock: clk, tracker: progress.NewTracker(nodes, clk.Now()), lines: progress.NewLines()}
	if tty, width := terminal(out); tty {
		f.screen, f.width = progress.NewScreen(out), width
	}
	return f
}

// show draws the live view, or writes the lines for what changed.
func (f *follower) show() error {
	now := f.clock.Now()
	if f.screen != nil {
		return f.screen.Draw(f.tracker.Frame(now, f.width()))
	}
	for _, l := range f.lines.Changes(f.tracker, now) {
		if _, err := fmt.Fprintln(f.out, l); err != nil {
			return err
		}
	}
	return nil
}

// errTimedOut: the wait ended before the drains did.
var errTimedOut = errors.New("timed out")

// run follows until every drain ended, the timeout (0: none) passes, or ctx
// ends. It returns errTimedOut on timeout and ctx's error on cancel.
func (f *follower) run(ctx context.Context, s *session, timeout time.Duration) error {
	var deadline <-chan time.Time
	if timeout > 0 {
		deadline = f.clock.After(timeout)
	}
	tick := f.clock.NewTicker(redrawEvery)
	defer tick.Stop()
	events := make(chan watch.Event, 64)
	watchErr := make(chan error, 1)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { watchErr <- watchDrains(wctx, s.client, events) }()
	for {
		if f.tracker.Done() {
			return f.show()
		}
		select {
		case ev := <-events:
			f.observe(ev)
			// Take what else arrived before drawing once.
			for drained := false; !drained; {
				select {
				case ev := <-events:
					f.observe(ev)
				default:
					drained = true
				}
			}
			if f.screen == nil || f.tracker.Done() {
				if err := f.show(); err != nil {
					return err
				}
			}
		case <-tick.C():
			if err := f.show(); err != nil {
				return err
			}
		case <-deadline:
			if err := f.show(); err != nil {
				return err
			}
			return errTimedOut
		case err := <-watchErr:
			return s.explain(err, "watching NodeDrains")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (f *follower) observe(ev watch.Event) {
	nd, ok := ev.Object.(*v1alpha1.NodeDrain)
	if !ok {
		return
	}
	if ev.Type == watch.Deleted {
		f.tracker.Forget(nd.Spec.NodeName)
		return
	}
	f.tracker.Observe(nd, f.clock.Now())
}

// watchDrains lists the NodeDrains, sends them as Added events, then sends
// what changes. It lists again when the watch ends or its resource version
// is too old, and returns only when ctx ends or the API refuses.
func watchDrains(ctx context.Context, c client.WithWatch, events chan<- watch.Event) error {
	send := func(ev watch.Event) bool {
		select {
		case events <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	failures := 0
	for ctx.Err() == nil {
		list := &v1alpha1.NodeDrainList{}
		if err := c.List(ctx, list); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if failures++; failures > 5 || apierrors.IsForbidden(err) {
				return err
			}
			time.Sleep(time.Duration(failures) * 200 * time.Millisecond)
			continue
		}
		failures = 0
		for i := range list.Items {
			if !send(watch.Event{Type: watch.Added, Object: &list.Items[i]}) {
				return nil
			}
		}
		w, err := c.Watch(ctx, &v1alpha1.NodeDrainList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
		if err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				break // most often "too old resource version": list again
			}
			if !send(ev) {
				w.Stop()
				return nil
			}
		}
		w.Stop()
	}
	return nil
}
