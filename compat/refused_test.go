package compat

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hotpath-go/hotpath/wsframe"
)

// causeless is a link that has begun no closing handshake.
type causeless struct{ link }

func (causeless) closeCause() *CloseError { return nil }

// An Emit refused by a link that dropped without a closing handshake waits
// for the read loop to say why, up to closeTimeout, but not while a
// callback runs: the callback may be the read loop's own (a listener that
// emits), which the loop waits for, and the wait would only run out. In a
// synctest bubble time moves only while every goroutine waits, so the
// listener's call must return at the instant it began; outside a
// callback, the wait runs its closeTimeout.
func TestRefusedEmitInACallbackDoesNotWaitForTheLoop(t *testing.T) {
	for _, inCallback := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			c := &Client{}
			cc := &clientConn{c: c, link: causeless{}, ended: make(chan struct{})}
			if inCallback {
				c.inCallbacks.Add(1)
			}
			began := time.Now()
			err := cc.refusedError(ErrDisconnected)
			waited := time.Since(began)
			if !errors.Is(err, ErrDisconnected) || CloseStatus(err) != wsframe.CloseAbnormal {
				t.Errorf("in a callback %v: %v, want ErrDisconnected with 1006", inCallback, err)
			}
			if want := map[bool]time.Duration{true: 0, false: closeTimeout}[inCallback]; waited != want {
				t.Errorf("in a callback %v: waited %v of the bubble's time, want %v", inCallback, waited, want)
			}
		})
	}
}
