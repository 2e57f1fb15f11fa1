package otelredlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

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
		otelredlock.MetricQuorumFailures, otelredlock.MetricOpDuration, otelredlock.MetricNodeDuration, otelredlock.MetricNodeErrors} {
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
