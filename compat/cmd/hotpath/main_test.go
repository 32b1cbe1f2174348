package main

import (
	"testing"
	"time"
)

func TestCheckFlags(t *testing.T) {
	const every = 500 * time.Millisecond
	for _, tc := range []struct {
		name            string
		args            []string
		maxMessage      int64
		ticker          time.Duration
		cert, key, quic string
		ok              bool
	}{
		{name: "defaults", maxMessage: 1 << 20, ticker: every, ok: true},
		{name: "cert with quic", maxMessage: 1, ticker: every, cert: "c.pem", key: "k.pem", quic: "127.0.0.1:4433", ok: true},
		{name: "stray argument", args: []string{"8080"}, maxMessage: 1 << 20, ticker: every},
		{name: "zero ticker", maxMessage: 1 << 20},
		{name: "negative ticker", maxMessage: 1 << 20, ticker: -time.Second},
		{name: "zero max message", ticker: every},
		{name: "negative max message", maxMessage: -5, ticker: every},
		{name: "key without cert", maxMessage: 1, ticker: every, key: "k.pem", quic: "127.0.0.1:4433"},
		{name: "cert without quic", maxMessage: 1, ticker: every, cert: "c.pem", key: "k.pem"},
	} {
		err := checkFlags(tc.args, tc.maxMessage, tc.ticker, tc.cert, tc.key, tc.quic)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}
