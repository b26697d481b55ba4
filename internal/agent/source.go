// Package agent is vacate-agent: it runs on a node, watches the signals
// that say the machine is going away (a shutdown or reboot from logind,
// SIGTERM, a cloud provider's spot, maintenance or scale-in notice), and
// turns each into a requester of its own on the node's NodeDrain, with the
// notice's deadline, so the node is drained with PDBs and evacuations
// before it goes. Sources (this package's subpackages) only read their
// signal; the Agent owns every change in the cluster.
package agent

import (
	"context"
	"slices"
	"time"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// RequesterPrefix starts the names of the agent's requesters:
// "agent:<source>".
const RequesterPrefix = "agent:"

// Notice is one reason, current now, that the machine is going away or
// may.
type Notice struct {
	// Source names the signal, and the requester: "agent:"+Source. It is a
	// taint value too (at most 63 characters: letters, digits, '-', '_',
	// '.'), such as "shutdown", "sigterm", "aws-spot", "gcp-preempted".
	Source string
	// CordonOnly keeps new pods off the node without draining it (an AWS
	// rebalance recommendation, by default).
	CordonOnly bool
	// Mode is what the drain should be: Maintenance when the machine comes
	// back (a reboot), Decommission when it goes away.
	Mode v1alpha1.DrainMode
	// Deadline is when the machine goes, or zero when the signal gives none.
	Deadline time.Time
	// Reason says what happens, for people: "AWS spot interruption:
	// terminate at 2026-11-23T12:00:00Z".
	Reason string
	// ID tells notices of one source apart (an Azure event's EventId);
	// empty when a source has at most one notice at a time.
	ID string
}

// SameNotices reports whether a and b are the same notices in the same
// order (deadlines compared as instants): a source reports only a change.
func SameNotices(a, b []Notice) bool {
	return slices.EqualFunc(a, b, func(x, y Notice) bool {
		return x.Source == y.Source && x.CordonOnly == y.CordonOnly && x.Mode == y.Mode &&
			x.Deadline.Equal(y.Deadline) && x.Reason == y.Reason && x.ID == y.ID
	})
}

// Source watches one signal.
type Source interface {
	// Name is the source's name, for logs and metrics ("logind", "aws").
	Name() string
	// Run reports the source's current notices to r every time they change
	// (an empty slice when there are none), the first time as soon as it
	// knows the state, until ctx ends. It retries what fails itself (a
	// metadata service that does not answer, reported as a Problem while it
	// lasts) and returns only when ctx ends or on an error it cannot
	// recover from (bad configuration).
	Run(ctx context.Context, r Reporter) error
}

// Owner is a Source that says which notice sources (Notice.Source) it
// reports. After a restart the agent withdraws a requester of its own that
// no source reports any more as soon as the sources that own it have
// reported once, whatever the others do (a metadata service that does not
// answer must not keep a rebooted node drained). A requester no Owner
// owns waits until every Source that is not an Owner has reported.
type Owner interface {
	NoticeSources() []string
}

// Reporter receives a source's state. Its methods may be called from any
// goroutine; each call replaces what the source reported before.
type Reporter interface {
	// Notices are the source's current notices.
	Notices([]Notice)
	// Problems are the source's current problems (none: an empty slice).
	Problems([]Problem)
}

// Finisher is a Source that must know when the agent is done with one of
// its notices: the node is Drained (drained is true), or the notice's
// deadline came first (false). A notice whose deadline had passed already
// when the agent first saw it is finished only once the node is Drained.
// logind releases its inhibitor lock, so the shutdown goes on; Azure
// acknowledges the event; the signal mode exits. Finish is called at most
// once per notice (Source and ID) while it stays current.
type Finisher interface {
	Finish(ctx context.Context, n Notice, drained bool) error
}

// Problem is something a source wants a person to know about the node's
// readiness to drain in time, such as a logind inhibit delay shorter than
// the agent needs, or a metadata service that does not answer. The agent
// logs it, counts it in a metric and shows it in the node's VacateAgent
// condition.
type Problem struct {
	// Source is the source's Name.
	Source string
	// Reason is CamelCase, such as "InhibitDelayTooShort".
	Reason string
	// Message says what is wrong and what to do.
	Message string
}
