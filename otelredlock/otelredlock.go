// Package otelredlock reports what a redlock.Client does to OpenTelemetry:
// metrics for acquire latency and attempts, quorum failures, each node's
// latency and errors, renewals, locks lost and how long locks were held,
// and a span for each acquire, extend and release, started when the
// operation starts, so that the spans of its Redis calls nest under it. It
// is a module of its own, so that the redlock package does not depend on
// OpenTelemetry.
//
//	obs, err := otelredlock.New() // the global meter and tracer providers
//	locker, err := redlock.New(nodes, redlock.WithObserver(obs))
package otelredlock

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/quorumlock/redlock"
)

// ScopeName is the instrumentation scope of the meter and tracer.
const ScopeName = "github.com/quorumlock/redlock"

// The metrics, by name.
const (
	MetricAcquireDuration = "redlock.acquire.duration"   // histogram, s; attributes kind, outcome
	MetricAcquireAttempts = "redlock.acquire.attempts"   // histogram; attributes kind, outcome
	MetricQuorumFailures  = "redlock.acquire.failures"   // counter: acquires that ended without the lock; kind
	MetricOpDuration      = "redlock.operation.duration" // histogram, s: extend and release; op, kind, outcome
	MetricNodeDuration    = "redlock.node.duration"      // histogram, s; node, op, outcome (granted, refused, error)
	MetricNodeErrors      = "redlock.node.errors"        // counter; node, op
	MetricRenewals        = "redlock.renewals"           // counter; kind, outcome
	MetricLocksLost       = "redlock.locks.lost"         // counter; kind
	MetricLockHeld        = "redlock.lock.held"          // histogram, s: from the acquire's return to the release (or the loss); kind, outcome (released, lost)
)

// Observer is a redlock.Observer that records to OpenTelemetry.
type Observer struct {
	tracer trace.Tracer

	acquireDuration metric.Float64Histogram
	acquireAttempts metric.Int64Histogram
	quorumFailures  metric.Int64Counter
	opDuration      metric.Float64Histogram
	nodeDuration    metric.Float64Histogram
	nodeErrors      metric.Int64Counter
	renewals        metric.Int64Counter
	locksLost       metric.Int64Counter
	lockHeld        metric.Float64Histogram
}

// Option configures New.
type Option func(*options)

type options struct {
	meters  metric.MeterProvider
	tracers trace.TracerProvider
}

// WithMeterProvider sets where the metrics go. Default: otel.GetMeterProvider().
func WithMeterProvider(p metric.MeterProvider) Option { return func(o *options) { o.meters = p } }

// WithTracerProvider sets where the spans go. Default: otel.GetTracerProvider().
func WithTracerProvider(p trace.TracerProvider) Option { return func(o *options) { o.tracers = p } }

// New returns an Observer; it fails only if an instrument cannot be made.
func New(opts ...Option) (*Observer, error) {
	o := options{meters: otel.GetMeterProvider(), tracers: otel.GetTracerProvider()}
	for _, opt := range opts {
		opt(&o)
	}
	m := o.meters.Meter(ScopeName)
	obs := &Observer{tracer: o.tracers.Tracer(ScopeName)}
	var err, e error
	obs.acquireDuration, e = m.Float64Histogram(MetricAcquireDuration, metric.WithUnit("s"),
		metric.WithDescription("Time from the call to Acquire (or TryAcquire, AcquireAll) to its return."))
	err = errors.Join(err, e)
	obs.acquireAttempts, e = m.Int64Histogram(MetricAcquireAttempts, metric.WithDescription("Attempts an acquire made."))
	err = errors.Join(err, e)
	obs.quorumFailures, e = m.Int64Counter(MetricQuorumFailures, metric.WithDescription("Acquires that ended without the lock."))
	err = errors.Join(err, e)
	obs.opDuration, e = m.Float64Histogram(MetricOpDuration, metric.WithUnit("s"), metric.WithDescription("Duration of extends and releases."))
	err = errors.Join(err, e)
	obs.nodeDuration, e = m.Float64Histogram(MetricNodeDuration, metric.WithUnit("s"), metric.WithDescription("Each node's reply time within an operation."))
	err = errors.Join(err, e)
	obs.nodeErrors, e = m.Int64Counter(MetricNodeErrors, metric.WithDescription("Node calls that failed or timed out."))
	err = errors.Join(err, e)
	obs.renewals, e = m.Int64Counter(MetricRenewals, metric.WithDescription("Automatic renewals, by outcome."))
	err = errors.Join(err, e)
	obs.locksLost, e = m.Int64Counter(MetricLocksLost, metric.WithDescription("Locks that ended before their release."))
	err = errors.Join(err, e)
	obs.lockHeld, e = m.Float64Histogram(MetricLockHeld, metric.WithUnit("s"),
		metric.WithDescription("How long a lock was held: from its acquire's return to its release, or its loss."))
	err = errors.Join(err, e)
	if err != nil {
		return nil, err
	}
	return obs, nil
}

func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "context"
	case errors.Is(err, redlock.ErrNotAcquired):
		return "not_acquired"
	case errors.Is(err, redlock.ErrLockLost):
		return "lost"
	}
	return "error"
}

// Observe records e.
func (o *Observer) Observe(ctx context.Context, e redlock.Event) {
	kind := attribute.String("redlock.kind", e.Kind)
	switch e.Op {
	case redlock.OpAcquire:
		attrs := metric.WithAttributes(kind, attribute.String("outcome", outcome(e.Err)))
		o.acquireDuration.Record(ctx, e.Duration.Seconds(), attrs)
		o.acquireAttempts.Record(ctx, int64(e.Attempts), attrs)
		if e.Err != nil {
			o.quorumFailures.Add(ctx, 1, metric.WithAttributes(kind))
		}
		o.span(ctx, e)
	case redlock.OpExtend, redlock.OpRelease:
		o.opDuration.Record(ctx, e.Duration.Seconds(), metric.WithAttributes(kind,
			attribute.String("redlock.op", string(e.Op)), attribute.String("outcome", outcome(e.Err))))
		if e.Op == redlock.OpRelease {
			o.lockHeld.Record(ctx, e.Held.Seconds(), metric.WithAttributes(kind, attribute.String("outcome", "released")))
		}
		o.span(ctx, e)
	case redlock.OpRenew:
		o.renewals.Add(ctx, 1, metric.WithAttributes(kind, attribute.String("outcome", outcome(e.Err))))
	case redlock.OpLost:
		o.locksLost.Add(ctx, 1, metric.WithAttributes(kind))
		o.lockHeld.Record(ctx, e.Held.Seconds(), metric.WithAttributes(kind, attribute.String("outcome", "lost")))
	case redlock.OpNode:
		answer := "refused"
		switch {
		case e.Err != nil:
			answer = "error"
		case e.Granted:
			answer = "granted"
		}
		node := attribute.String("redlock.node", e.Addr)
		op := attribute.String("redlock.op", string(e.NodeOp))
		o.nodeDuration.Record(ctx, e.Duration.Seconds(), metric.WithAttributes(node, op, attribute.String("outcome", answer)))
		if e.Err != nil {
			o.nodeErrors.Add(ctx, 1, metric.WithAttributes(node, op))
		}
	}
}

// opSpan is the context key under which Start keeps the span of the
// operation it started, for Observe to end.
type opSpan struct{}

// Start starts the span of an acquire, extend or release: the operation
// runs under the context it returns, so that the Redis client's spans of
// its node calls (with go-redis's own OpenTelemetry instrumentation) are
// its children. Observe ends it.
func (o *Observer) Start(ctx context.Context, e redlock.Event) context.Context {
	ctx, span := o.tracer.Start(ctx, "redlock."+string(e.Op), trace.WithTimestamp(e.Start),
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("redlock.kind", e.Kind), attribute.String("redlock.key", e.Key)))
	return context.WithValue(ctx, opSpan{}, span)
}

// span ends the span Start began for e's operation; for an operation that
// was not started so, it records one with e's own start and end.
func (o *Observer) span(ctx context.Context, e redlock.Event) {
	span, started := ctx.Value(opSpan{}).(trace.Span)
	if !started {
		_, span = o.tracer.Start(ctx, "redlock."+string(e.Op), trace.WithTimestamp(e.Start),
			trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("redlock.kind", e.Kind), attribute.String("redlock.key", e.Key)))
	}
	if e.Op == redlock.OpAcquire {
		span.SetAttributes(attribute.Int("redlock.attempts", e.Attempts))
	}
	if e.Err != nil {
		span.RecordError(e.Err)
		span.SetStatus(codes.Error, outcome(e.Err))
	}
	span.End(trace.WithTimestamp(e.Start.Add(e.Duration)))
}

var _ redlock.Starter = (*Observer)(nil)
