package backoff

import (
	"context"
	"testing"
	"time"
)

// Each delay lies in the upper half of a bound that doubles up to Max, and
// Reset starts again from Min.
func TestDelay(t *testing.T) {
	b := Backoff{Min: 100 * time.Millisecond, Max: 800 * time.Millisecond}
	for round := range 2 {
		for i, bound := range []time.Duration{100, 200, 400, 800, 800, 800} {
			bound *= time.Millisecond
			if d := b.Delay(); d < bound/2 || d > bound {
				t.Fatalf("round %d, delay %d: %v, want within [%v, %v]", round, i, d, bound/2, bound)
			}
		}
		b.Reset()
	}
}

func TestSleep(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) {
		t.Error("Sleep of 1ms with a live context said it was cut short")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Error("Sleep with a cancelled context said the whole hour passed")
	}
}
