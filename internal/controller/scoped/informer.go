package scoped

import (
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
)

// The cache is an informer for controllers' watches (source.Informer): a
// handler added gets the events of every scope, those running and those
// started later (a scope's first list arrives as adds). A scope stopped
// sends no deletes: its objects are not gone, only no longer watched.
var _ crcache.Informer = (*Cache[*corev1.Pod])(nil)

// registration is a handler added to the cache, and so to every scope's
// informer.
type registration struct {
	handler toolscache.ResourceEventHandler
	options toolscache.HandlerOptions
}

// HasSynced: the handler has had the events of every scope listed so far.
func (r *registration) HasSynced() bool { return true }

// HasSyncedChecker is done at once: scopes come and go with the work.
func (r *registration) HasSyncedChecker() toolscache.DoneChecker { return done{} }

type done struct{}

func (done) Name() string { return "scoped cache" }
func (done) Done() <-chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

// AddEventHandler adds a handler to every scope, present and future.
func (c *Cache[T]) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return c.AddEventHandlerWithOptions(h, toolscache.HandlerOptions{})
}

// AddEventHandlerWithResyncPeriod adds a handler; scopes do not resync.
func (c *Cache[T]) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, _ time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return c.AddEventHandlerWithOptions(h, toolscache.HandlerOptions{})
}

// AddEventHandlerWithOptions adds a handler to every scope, present and
// future.
func (c *Cache[T]) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, opts toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	r := &registration{handler: h, options: opts}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.handlers = append(c.handlers, r)
	for _, e := range c.scopes {
		reg, err := e.informer.AddEventHandlerWithOptions(h, opts)
		if err != nil {
			return nil, err
		}
		e.regs[r] = reg
	}
	return r, nil
}

// RemoveEventHandler removes a handler from every scope.
func (c *Cache[T]) RemoveEventHandler(handle toolscache.ResourceEventHandlerRegistration) error {
	r, ok := handle.(*registration)
	if !ok {
		return errors.New("not a registration of this cache")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, h := range c.handlers {
		if h == r {
			c.handlers = append(c.handlers[:i], c.handlers[i+1:]...)
			break
		}
	}
	for _, e := range c.scopes {
		if reg := e.regs[r]; reg != nil {
			_ = e.informer.RemoveEventHandler(reg)
			delete(e.regs, r)
		}
	}
	return nil
}

// AddIndexers is refused: a scope's objects are few, read whole.
func (c *Cache[T]) AddIndexers(toolscache.Indexers) error {
	return errors.New("a scoped cache has no indexes")
}

// HasSynced is true: each read waits for its own scope (Want).
func (c *Cache[T]) HasSynced() bool { return true }

// HasSyncedChecker is done at once, as HasSynced.
func (c *Cache[T]) HasSyncedChecker() toolscache.DoneChecker { return done{} }

// IsStopped says whether the cache has stopped.
func (c *Cache[T]) IsStopped() bool {
	select {
	case <-c.started:
		return c.ctx.Err() != nil
	default:
		return false
	}
}
