package otelredlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/otelredlock"
)

func TestObserver(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tracers := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	obs, err := otelredlock.New(otelredlock.WithMeterProvider(meters), otelredlock.WithTracerProvider(tracers))
	if err != nil {
		t.Fatal(err)
	}

	var nodes []redis.UniversalClient
	var servers []*miniredis.Miniredis
	for range 3 {
		s := miniredis.RunT(t)
		servers = append(servers, s)
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		nodes = append(nodes, c)
	}
	servers[2].Close() // one node down: node errors
	locker, err := redlock.New(nodes, redlock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lock, err := locker.Acquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	servers[0].Set("k", "someone else")
	if _, err := locker.TryAcquire(ctx, "k", time.Minute); err == nil {
		t.Fatal("acquired a held lock")
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			got[m.Name] = true
			if m.Name == otelredlock.MetricQuorumFailures {
				sum := m.Data.(metricdata.Sum[int64])
				if len(sum.DataPoints) != 1 || sum.DataPoints[0].Value != 1 {
					t.Errorf("%s = %+v, want 1", m.Name, sum.DataPoints)
				}
			}
		}
	}
	for _, name := range []string{otelredlock.MetricAcquireDuration, otelredlock.MetricAcquireAttempts,
		otelredlock.MetricQuorumFailures, otelredlock.MetricOpDuration, otelredlock.MetricNodeDuration, otelredlock.MetricNodeErrors,
		otelredlock.MetricLockHeld} {
		if !got[name] {
			t.Errorf("no %s recorded", name)
		}
	}

	var names []string
	for _, s := range spans.Ended() {
		names = append(names, s.Name())
		if s.EndTime().Before(s.StartTime()) {
			t.Errorf("span %s ends before it starts", s.Name())
		}
	}
	if len(names) != 3 || names[0] != "redlock.acquire" || names[1] != "redlock.release" || names[2] != "redlock.acquire" {
		t.Errorf("spans %v, want acquire, release, acquire", names)
	}
	if st := spans.Ended()[2].Status(); st.Code.String() != "Error" {
		t.Errorf("the failed acquire's span status %v, want Error", st)
	}
}

// spanOfCalls records, for each command a node's client sends, the span
// current in its context.
type spanOfCalls struct {
	mu    sync.Mutex
	spans map[trace.SpanID]int
}

func (h *spanOfCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *spanOfCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.note(ctx)
		return next(ctx, cmd)
	}
}
func (h *spanOfCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.note(ctx)
		return next(ctx, cmds)
	}
}
func (h *spanOfCalls) note(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.spans[trace.SpanFromContext(ctx).SpanContext().SpanID()]++
}

// TestObserver_spansStartWithTheOperation: an acquire's and a release's
// spans start when the operation starts, and the node calls run under them
// (a Redis client's own spans nest there). They used to be made once the
// operation had ended, outside every call.
func TestObserver_spansStartWithTheOperation(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tracers := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	obs, err := otelredlock.New(otelredlock.WithTracerProvider(tracers))
	if err != nil {
		t.Fatal(err)
	}
	calls := &spanOfCalls{spans: map[trace.SpanID]int{}}
	var nodes []redis.UniversalClient
	for range 3 {
		s := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		c.AddHook(calls)
		t.Cleanup(func() { _ = c.Close() })
		nodes = append(nodes, c)
	}
	locker, err := redlock.New(nodes, redlock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lock, err := locker.Acquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_ = locker.Drain(ctx)
	ended := spans.Ended()
	if len(ended) != 2 {
		t.Fatalf("%d spans, want an acquire's and a release's", len(ended))
	}
	calls.mu.Lock()
	defer calls.mu.Unlock()
	for _, s := range ended {
		if calls.spans[s.SpanContext().SpanID()] == 0 {
			t.Errorf("no node call ran under the %s span (calls by span: %v)", s.Name(), calls.spans)
		}
	}
}
