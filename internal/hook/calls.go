package hook

import (
	"context"
	"errors"
	"time"
)

// Results of a call besides the states an app answers (InProgress,
// Completed, Failed), as the controller's metrics count them: a small,
// fixed set.
const (
	// ResultAnswered is a 2xx without a state: a POST's or a DELETE's
	// acknowledgement (a DELETE's 404 too: nothing to cancel).
	ResultAnswered = "Answered"
	// ResultNotFound is a GET's 404: the app does not know the drain
	// (it restarted): the prober starts it again.
	ResultNotFound = "NotFound"
	// ResultHTTPError is any other answer than 2xx (a redirect included).
	ResultHTTPError = "HTTPError"
	// ResultBadAnswer is a 2xx that is not a well-formed answer about this
	// run: malformed or oversized, an unknown state, another drain or run,
	// Completed with work remaining, a GET's empty body.
	ResultBadAnswer = "BadAnswer"
	// ResultUnreachable is a call that got no answer: refused, reset,
	// no route.
	ResultUnreachable = "Unreachable"
	// ResultTimeout is a call that got no answer within the client's
	// timeout.
	ResultTimeout = "Timeout"
	// ResultNoToken is a call not made: its bearer token could not be had.
	ResultNoToken = "NoToken"
)

// Results are every result a call may have, for metrics' zero series.
var Results = []string{InProgress, Completed, Failed, ResultAnswered, ResultNotFound, ResultHTTPError,
	ResultBadAnswer, ResultUnreachable, ResultTimeout, ResultNoToken}

// Call is one hook call as the prober saw it.
type Call struct {
	// Method is POST, GET or DELETE.
	Method string
	// Result is the state answered, or one of the Result constants.
	Result string
	// Duration is from the request to the whole answer read; 0 for a call
	// not made (NoToken).
	Duration time.Duration
}

// callError is a failed call with its result.
type callError struct {
	result string
	error
}

func (e callError) Unwrap() error { return e.error }

// failed marks err as a call that ended with result.
func failed(result string, err error) error { return callError{result: result, error: err} }

// resultOf is a call's result: the state of an answer that has one.
func resultOf(err error, state string) string {
	var ce callError
	var nf notFound
	switch {
	case err == nil && state != "":
		return state
	case err == nil:
		return ResultAnswered
	case isTokenError(err):
		return ResultNoToken
	case errors.As(err, &nf):
		return ResultNotFound
	case errors.As(err, &ce):
		return ce.result
	}
	return ResultUnreachable
}

// observed makes a call and tells Observe of it, unless the conversation
// was stopped meanwhile.
func (p *Prober) observed(ctx context.Context, method string, t Target, body []byte, res *Result) error {
	start := time.Now()
	err := p.call(ctx, method, t, body, res)
	if p.Observe == nil || ctx.Err() != nil {
		return err
	}
	c := Call{Method: method, Duration: time.Since(start)}
	state := ""
	if res != nil {
		state = res.State
	}
	if c.Result = resultOf(err, state); c.Result == ResultNoToken {
		c.Duration = 0
	}
	p.Observe(c)
	return err
}
