package eviction

import "golang.org/x/time/rate"

func newTokenBucket(qps float64, burst int) *rate.Limiter {
	return rate.NewLimiter(rate.Limit(qps), burst)
}
