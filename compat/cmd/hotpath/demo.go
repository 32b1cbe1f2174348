package main

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hotpath-go/hotpath/compat"
)

type echoRequest struct {
	Text string `json:"text"`
}

type timeResponse struct {
	Now string `json:"now"`
}

// demoRouter is what the demo page calls: echo/say answers its text,
// time/now the server's clock. Chat messages are client emits to the
// "lobby" room, which the server relays without a method of its own.
func demoRouter() *compat.Router {
	r := compat.NewRouter()
	compat.Handle(r, "echo/say", func(ctx context.Context, req echoRequest) (echoRequest, error) {
		// Characters, as the page's input counts them (its maxlength).
		if utf8.RuneCountInString(req.Text) > 4096 {
			return req, &compat.Error{Code: compat.ErrInvalidParams.Code, Message: "text longer than 4096 characters"}
		}
		return req, nil
	})
	compat.Handle(r, "time/now", func(ctx context.Context, _ struct{}) (timeResponse, error) {
		return timeResponse{Now: time.Now().UTC().Format(time.RFC3339Nano)}, nil
	})
	compat.Handle(r, "echo/upper", func(ctx context.Context, req echoRequest) (echoRequest, error) {
		return echoRequest{Text: strings.ToUpper(req.Text)}, nil
	})
	return r
}

// maxChatEmit is the demo's Limits.MaxEmitSize by default (-max-emit):
// the largest room emit a
// client may send, a chat line being the one the page sends. The page's
// input takes 1000 characters (its maxlength), which JSON encodes in at
// most 6 bytes each (a \u escape), with a name of 32 and a timestamp:
// about 6.3 KB, so 8 KiB passes every line the page can send. Without it
// the server relayed lines up to -max-message (a mebibyte by default) to
// every member; a larger emit is now dropped, counted and logged.
const maxChatEmit = 8 << 10

// demoLimits are the demo's per-connection limits: -max-message and
// -max-emit (0: up to -max-message).
func demoLimits(maxMessage, maxEmit int64) compat.Limits {
	return compat.Limits{MaxMessageSize: maxMessage, MaxEmitSize: int(maxEmit)}
}

// demoAllowEmit lets clients emit to any room they are in but the
// ticker's, whose prices come from the server alone: without it, one
// client could send every viewer a made-up tick.
func demoAllowEmit(_ *compat.Peer, room, _ string) bool {
	return room != "ticker"
}

type tick struct {
	Symbol string  `json:"symbol"`
	Price  float64 `json:"price"`
	At     int64   `json:"at"` // unix milliseconds
}

// runTicker emits a random walk of three prices to the "ticker" room,
// while it has members, until ctx ends.
func runTicker(ctx context.Context, srv *compat.Server, every time.Duration) {
	prices := map[string]float64{"HOT": 100, "PATH": 42, "WS": 7.5}
	symbols := []string{"HOT", "PATH", "WS"}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if srv.Members("ticker") == 0 {
				continue
			}
			for _, s := range symbols {
				p := prices[s] * (1 + (rand.Float64()-0.5)/50)
				p = math.Round(p*100) / 100
				prices[s] = p
				srv.Emit("ticker", "tick", tick{Symbol: s, Price: p, At: now.UnixMilli()})
			}
		}
	}
}
