package progress

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
)

// redrawEvery is how often the live view redraws when nothing changes, so
// the clocks (elapsed, blocked for, ETA) move.
const redrawEvery = 500 * time.Millisecond

// Terminal reports whether w is a terminal whose size is known, and a
// function returning its width and height.
func Terminal(w io.Writer) (bool, func() (int, int)) {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return false, nil
	}
	size := func() (int, int) {
		width, height, err := term.GetSize(int(f.Fd()))
		if err != nil {
			return 0, 0
		}
		return width, height
	}
	if width, _ := size(); width <= 0 {
		return false, nil // a terminal of unknown size: lines are safer
	}
	return true, size
}

// Follower shows the drains of some nodes until they end: a live view on a
// terminal, else one line per change. It is the part of this package that
// talks to the API server: it lists and watches NodeDrains.
type Follower struct {
	out     io.Writer
	clock   clock.WithTicker
	Tracker *Tracker
	screen  *Screen // nil: line output
	size    func() (int, int)
	lines   *Lines
}

// NewFollower follows the drains of nodes, writing to out.
func NewFollower(out io.Writer, clk clock.WithTicker, nodes []string) *Follower {
	f := &Follower{out: out, clock: clk, Tracker: NewTracker(nodes, clk.Now()), lines: NewLines()}
	if tty, size := Terminal(out); tty {
		f.screen, f.size = NewScreen(out), size
	}
	return f
}

// Show draws the live view, or writes the lines for what changed.
func (f *Follower) Show() error {
	now := f.clock.Now()
	if f.screen != nil {
		width, height := f.size()
		return f.screen.Draw(Fit(f.Tracker.Frame(now, width), height))
	}
	for _, l := range f.lines.Changes(f.Tracker, now) {
		if _, err := fmt.Fprintln(f.out, l); err != nil {
			return err
		}
	}
	return nil
}

// ErrTimedOut: the wait ended before the drains did.
var ErrTimedOut = errors.New("timed out")

// Until follows until every drain ended, stop returns true, the timeout (0:
// none) passes, or ctx ends. It returns ErrTimedOut on timeout, ctx's error
// when ctx ends, and the watch's error if the API refuses it.
func (f *Follower) Until(ctx context.Context, c client.WithWatch, timeout time.Duration, stop func(*Tracker) bool) error {
	var deadline <-chan time.Time
	if timeout > 0 {
		deadline = f.clock.After(timeout)
	}
	if f.screen != nil {
		f.screen.Reset() // whatever was printed since belongs above the next frame
	}
	tick := f.clock.NewTicker(redrawEvery)
	defer tick.Stop()
	events := make(chan watch.Event, 64)
	watchErr := make(chan error, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { watchErr <- WatchDrains(wctx, c, events) }()
	for {
		if f.Tracker.Done() || (stop != nil && stop(f.Tracker)) {
			return f.Show()
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
			if f.screen == nil || f.Tracker.Done() {
				if err := f.Show(); err != nil {
					return err
				}
			}
		case <-tick.C():
			if err := f.Show(); err != nil {
				return err
			}
		case <-deadline:
			if err := f.Show(); err != nil {
				return err
			}
			return ErrTimedOut
		case err := <-watchErr:
			if err == nil { // the watch ends without error only when ctx does
				err = ctx.Err()
			}
			if err == nil {
				err = errors.New("the watch of NodeDrains ended")
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (f *Follower) observe(ev watch.Event) {
	if list, ok := ev.Object.(*v1alpha1.NodeDrainList); ok && ev.Type == Listed {
		// What a listing lacks is gone, even if no watch saw it go.
		present := map[string]bool{}
		for _, nd := range list.Items {
			present[nd.Spec.NodeName] = true
		}
		for _, n := range f.Tracker.Nodes() {
			if !present[n.Name] {
				f.Tracker.Gone(n.Name)
			}
		}
		return
	}
	nd, ok := ev.Object.(*v1alpha1.NodeDrain)
	if !ok {
		return
	}
	if ev.Type == watch.Deleted {
		f.Tracker.Forget(nd.Spec.NodeName)
		return
	}
	f.Tracker.Observe(nd, f.clock.Now())
}

// Listed is the event WatchDrains sends after the Added events of each
// listing, with the list: what it lacks is gone.
const Listed watch.EventType = "Listed"

// watchFailures is how many list or watch calls in a row may fail before
// WatchDrains gives up.
const watchFailures = 5

// WatchDrains lists the NodeDrains and sends them as Added events, then a
// Listed event with the list, then what changes. It lists again when the
// watch ends or its resource version is too old. It returns nil when ctx
// ends, and an error when the API refuses the list or watch (RBAC) or
// keeps failing.
func WatchDrains(ctx context.Context, c client.WithWatch, events chan<- watch.Event) error {
	send := func(ev watch.Event) bool {
		select {
		case events <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	failures := 0
	fail := func(err error) error {
		if ctx.Err() != nil {
			return nil
		}
		if failures++; failures > watchFailures || apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			return err
		}
		select {
		case <-time.After(time.Duration(failures) * 200 * time.Millisecond):
		case <-ctx.Done():
		}
		return nil
	}
	for ctx.Err() == nil {
		list := &v1alpha1.NodeDrainList{}
		if err := c.List(ctx, list); err != nil {
			if err := fail(err); err != nil {
				return err
			}
			continue
		}
		for i := range list.Items {
			if !send(watch.Event{Type: watch.Added, Object: &list.Items[i]}) {
				return nil
			}
		}
		if !send(watch.Event{Type: Listed, Object: list}) {
			return nil
		}
		w, err := c.Watch(ctx, &v1alpha1.NodeDrainList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
		if err != nil {
			if err := fail(err); err != nil {
				return err
			}
			continue
		}
		failures = 0
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
