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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
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

// WatchDrains sends the NodeDrains as Added events, then a Listed event
// with the list, then what changes (Added, Modified, Deleted), from
// client-go's informer: it lists and watches, lists again when a watch
// ends or its resource version is too old, and sends as Deleted what a new
// listing lacks. It returns nil when ctx ends, and an error when the API
// server refuses the list or watch (RBAC), which the informer would retry
// for ever.
func WatchDrains(ctx context.Context, c client.WithWatch, events chan<- watch.Event) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list := &v1alpha1.NodeDrainList{}
			return list, c.List(ctx, list, &client.ListOptions{Raw: &opts})
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, &v1alpha1.NodeDrainList{}, &client.ListOptions{Raw: &opts})
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &v1alpha1.NodeDrain{}, 0, cache.Indexers{})
	refused := make(chan error, 1)
	if err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			select {
			case refused <- err:
			default:
			}
			return
		}
		cache.DefaultWatchErrorHandler(ctx, r, err)
	}); err != nil {
		return err
	}
	send := func(t watch.EventType, obj any) {
		if nd, ok := obj.(*v1alpha1.NodeDrain); ok {
			select {
			case events <- watch.Event{Type: t, Object: nd.DeepCopy()}:
			case <-ctx.Done():
			}
		}
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { send(watch.Added, obj) },
		UpdateFunc: func(_, obj any) { send(watch.Modified, obj) },
		DeleteFunc: func(obj any) {
			if gone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = gone.Obj
			}
			send(watch.Deleted, obj)
		},
	})
	if err != nil {
		return err
	}
	go inf.RunWithContext(ctx)
	// The initial listing's Added events are delivered once the
	// registration has synced: then the Listed event.
	synced := make(chan struct{})
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
			close(synced)
		}
	}()
	select {
	case err := <-refused:
		return err
	case <-ctx.Done():
		return nil
	case <-synced:
	}
	list := &v1alpha1.NodeDrainList{}
	for _, obj := range inf.GetStore().List() {
		if nd, ok := obj.(*v1alpha1.NodeDrain); ok {
			list.Items = append(list.Items, *nd.DeepCopy())
		}
	}
	select {
	case events <- watch.Event{Type: Listed, Object: list}:
	case <-ctx.Done():
		return nil
	}
	select {
	case err := <-refused:
		return err
	case <-ctx.Done():
		return nil
	}
}
