package main

import (
	"context"
	"fmt"
	"net"
	"net/rpc"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// An rpcFramework is one RPC stack doing the rpc scenario's job: a call
// whose request is a byte string and whose answer is the same bytes.
type rpcFramework struct {
	Library string
	Role    Role
	// Open starts the server on ln and connects one client to it; call
	// makes one call and returns the answer's length.
	Open func(ctx context.Context, ln net.Listener) (call func(context.Context, []byte) (int, error), close func() error, err error)
}

var rpcFrameworks = []rpcFramework{
	{Library: "hotpath RPC (Go client)", Role: Ours, Open: openHotpathRPC(false)},
	{Library: "hotpath RPC (Go client, no batching)", Role: Ours, Open: openHotpathRPC(true)},
	{Library: "grpc unary (protobuf)", Role: Peer, Open: openGRPC},
	{Library: "net/rpc (gob)", Role: Peer, Open: openNetRPC},
}

func init() {
	register(&Scenario{
		Number:   5,
		Name:     "rpc",
		Title:    "RPC frameworks",
		Loopback: true,
		About: "The same call through three RPC stacks over TCP on 127.0.0.1, each with its own client on " +
			"one connection: a request of 32 bytes answered with the same bytes, with 1 call in flight " +
			"or 64 (64 goroutines calling at once), for a bounded time. hotpath: compat's Go client " +
			"calling a method registered with compat.Handle on []byte (raw bytes pass the codec " +
			"untouched), with and without client batching. grpc: google.golang.org/grpc unary over " +
			"HTTP/2 with its default protobuf codec; the message is protobuf's well-known BytesValue " +
			"and the service is declared by hand (a grpc.ServiceDesc, what protoc would generate), so " +
			"no generated code is needed. net/rpc: the standard library's, gob over TCP. allocs/call " +
			"counts the whole process, client and server.",
		Metrics: []Metric{
			{Key: "rate", Unit: "calls/s", Better: HigherIsBetter},
			{Key: "p50", Unit: "p50 µs", Better: LowerIsBetter},
			{Key: "p99", Unit: "p99 µs", Better: LowerIsBetter},
			{Key: "allocs", Unit: "allocs/call", Better: LowerIsBetter},
		},
		Cases: rpcCases,
	})
}

func rpcCases(cfg Config) ([]Case, error) {
	d := 500 * time.Millisecond
	if cfg.Quick {
		d = 100 * time.Millisecond
	}
	var cases []Case
	for _, window := range echoWindows {
		c := Case{Label: fmt.Sprintf("%d B, %d in flight", rpcSize, window)}
		for _, fw := range rpcFrameworks {
			c.Rows = append(c.Rows, Row{Library: fw.Library, Role: fw.Role, Open: func(ctx context.Context) (Instance, error) {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					return nil, err
				}
				call, closeFn, err := fw.Open(ctx, ln)
				if err != nil {
					ln.Close()
					return nil, err
				}
				return newCallRow(rpcSize, window, d, call, closeFn), nil
			}})
		}
		cases = append(cases, c)
	}
	return cases, nil
}

// rpcSize is the size of the rpc scenario's requests.
const rpcSize = 32

func openHotpathRPC(noBatching bool) func(context.Context, net.Listener) (func(context.Context, []byte) (int, error), func() error, error) {
	return func(ctx context.Context, ln net.Listener) (func(context.Context, []byte) (int, error), func() error, error) {
		ln.Close() // openGoClientRow listens on a port of its own
		inst, err := openGoClientRow(noBatching)(rpcSize, 1, 0)(ctx)
		if err != nil {
			return nil, nil, err
		}
		row := inst.(*callRow)
		return row.call, row.close, nil
	}
}

// grpcEchoDesc declares the service bench.Echo with one unary method, as
// protoc-gen-go-grpc would from
//
//	service Echo { rpc Echo(google.protobuf.BytesValue) returns (google.protobuf.BytesValue); }
var grpcEchoDesc = grpc.ServiceDesc{
	ServiceName: "bench.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.BytesValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			return in, nil
		},
	}},
}

func openGRPC(ctx context.Context, ln net.Listener) (func(context.Context, []byte) (int, error), func() error, error) {
	srv := grpc.NewServer()
	srv.RegisterService(&grpcEchoDesc, struct{}{})
	go func() { _ = srv.Serve(ln) }()
	conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		srv.Stop()
		return nil, nil, err
	}
	answer := func(ctx context.Context, req []byte) ([]byte, error) {
		out := new(wrapperspb.BytesValue)
		err := conn.Invoke(ctx, "/bench.Echo/Echo", &wrapperspb.BytesValue{Value: req}, out)
		return out.Value, err
	}
	call := func(ctx context.Context, req []byte) (int, error) {
		out, err := answer(ctx, req)
		return len(out), err
	}
	closeFn := func() error {
		err := conn.Close()
		srv.Stop()
		return err
	}
	if err := checkCall(ctx, rpcSize, answer); err != nil {
		closeFn()
		return nil, nil, err
	}
	return call, closeFn, nil
}

// EchoService is net/rpc's receiver: exported, with the method shape
// net/rpc requires.
type EchoService struct{}

// Echo answers the request's bytes.
func (EchoService) Echo(req []byte, resp *[]byte) error {
	*resp = req
	return nil
}

func openNetRPC(ctx context.Context, ln net.Listener) (func(context.Context, []byte) (int, error), func() error, error) {
	srv := rpc.NewServer()
	if err := srv.RegisterName("Echo", EchoService{}); err != nil {
		return nil, nil, err
	}
	go srv.Accept(ln)
	client, err := rpc.Dial("tcp", ln.Addr().String())
	if err != nil {
		ln.Close()
		return nil, nil, err
	}
	// Each caller reuses its answer buffer, as hotpath's row does (gob
	// decodes into a slice with the room).
	answers := sync.Pool{New: func() any { return new([]byte) }}
	call := func(_ context.Context, req []byte) (int, error) {
		resp := answers.Get().(*[]byte)
		defer answers.Put(resp)
		err := client.Call("Echo.Echo", req, resp)
		return len(*resp), err
	}
	closeFn := func() error {
		err := client.Close()
		ln.Close()
		return err
	}
	// net/rpc's Call has no context: Go with a bound, for the check.
	first := func(ctx context.Context, req []byte) ([]byte, error) {
		var resp []byte
		select {
		case c := <-client.Go("Echo.Echo", req, &resp, make(chan *rpc.Call, 1)).Done:
			return resp, c.Error
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err := checkCall(ctx, rpcSize, first); err != nil {
		closeFn()
		return nil, nil, err
	}
	return call, closeFn, nil
}
