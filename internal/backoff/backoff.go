// Package backoff spaces retries: capped exponential backoff with jitter,
// so that many clients that failed together do not retry together.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff hands out growing waits, from Min doubling up to Max. The zero
// value of its unexported state starts at Min.
type Backoff struct {
	Min, Max time.Duration
	next     time.Duration
}

// Reset starts again from Min.
func (b *Backoff) Reset() { b.next = 0 }

// Delay returns the next wait: each one doubles up to Max, and is drawn at
// random from its upper half so that many clients do not retry in step.
func (b *Backoff) Delay() time.Duration {
	if b.next == 0 {
		b.next = b.Min
	}
	d := b.next
	b.next = min(2*b.next, b.Max)
	return d/2 + rand.N(d/2+1)
}

// Wait sleeps for the next delay, or until ctx ends.
func (b *Backoff) Wait(ctx context.Context) { Sleep(ctx, b.Delay()) }

// Sleep waits for d or until ctx ends, and says whether the whole d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
