package rtt

import (
	"math"
	"testing"
	"time"
)

const ms = time.Millisecond

func TestEstimate_Wait(t *testing.T) {
	for _, tt := range []struct {
		name    string
		samples []time.Duration
		timeout []time.Duration // TimedOut calls, after the samples
		want    time.Duration
	}{
		{"nothing known", nil, nil, 0},
		// RFC 6298: the first sample R gives SRTT R, RTTVAR R/2, so R + 2R.
		{"one sample", []time.Duration{600 * ms}, nil, 1800 * ms},
		// A steady round trip: the variation decays, and half the round
		// trip again is the least margin.
		{"steady", repeat(600*ms, 60), nil, 900 * ms},
		{"steady on loopback", repeat(200*time.Microsecond, 60), nil, 300 * time.Microsecond},
		// No reply within 500 ms: the next wait is at least a second,
		// then two, until a reply comes.
		{"timed out", nil, []time.Duration{500 * ms}, time.Second},
		{"timed out twice", nil, []time.Duration{500 * ms, time.Second}, 2 * time.Second},
		{"timed out, then shorter", repeat(ms, 10), []time.Duration{500 * ms}, time.Second},
		{"no overflow", nil, []time.Duration{math.MaxInt64}, math.MaxInt64},
		{"a huge sample", []time.Duration{math.MaxInt64}, nil, math.MaxInt64},
	} {
		var e Estimate
		for _, d := range tt.samples {
			e.Sample(d)
		}
		for _, d := range tt.timeout {
			e.TimedOut(d)
		}
		got, known := e.Wait()
		if absDiff(got, tt.want) > tt.want/100 || known != (tt.want > 0) {
			t.Errorf("%s: Wait = %v, %v; want %v", tt.name, got, known, tt.want)
		}
	}
}

// TestEstimate_replyEndsBackoff: a reply ends the doubling; the wait is the
// round trips' again.
func TestEstimate_replyEndsBackoff(t *testing.T) {
	var e Estimate
	e.TimedOut(4 * time.Second)
	e.Sample(10 * ms)
	if got, _ := e.Wait(); got != 30*ms {
		t.Fatalf("Wait after a reply = %v, want 30ms", got)
	}
}

func TestTimeout(t *testing.T) {
	far := func(d time.Duration) func(*Estimate) {
		return func(e *Estimate) {
			for range 60 {
				e.Sample(d)
			}
		}
	}
	hung := func(e *Estimate) { e.TimedOut(time.Hour) }
	unknown := func(*Estimate) {}
	for _, tt := range []struct {
		name           string
		nodes          []func(*Estimate)
		q              int
		floor, ceiling time.Duration
		want           time.Duration
	}{
		{"nothing known: as unknown, here the ceiling", []func(*Estimate){unknown, unknown, unknown}, 2, 500 * ms, 2 * time.Second, 2 * time.Second},
		{"one node known: the ceiling for the quorum", []func(*Estimate){far(ms), unknown, unknown}, 2, 500 * ms, 2 * time.Second, 2 * time.Second},
		{"a quorum known", []func(*Estimate){far(ms), far(ms), unknown}, 2, 500 * ms, 2 * time.Second, 500 * ms},
		{"nodes near: the floor", []func(*Estimate){far(ms), far(ms), far(ms)}, 2, 50 * ms, time.Second, 50 * ms},
		{"every node far: what the quorum needs", []func(*Estimate){far(600 * ms), far(600 * ms), far(600 * ms)}, 2, 500 * ms, 2500 * ms, 900 * ms},
		{"a hung minority does not count", []func(*Estimate){hung, far(ms), far(ms)}, 2, 50 * ms, time.Second, 50 * ms},
		{"a far minority does not count", []func(*Estimate){far(time.Second), far(ms), far(2 * ms)}, 2, 50 * ms, time.Minute, 50 * ms},
		{"a hung majority: the ceiling", []func(*Estimate){hung, hung, far(ms)}, 2, 50 * ms, time.Second, time.Second},
		{"the ceiling below the floor: the floor", []func(*Estimate){hung, hung, hung}, 2, 50 * ms, 10 * ms, 50 * ms},
		{"one node", []func(*Estimate){far(300 * ms)}, 1, 500 * ms, 2 * time.Second, 500 * ms},
		{"a semaphore's quorum", []func(*Estimate){far(ms), far(ms), far(time.Second)}, 3, 50 * ms, time.Minute, 1500 * ms},
		{"many nodes", make([]func(*Estimate), 40), 21, 5 * ms, time.Second, time.Second},
	} {
		nodes := make([]Estimate, len(tt.nodes))
		for i, set := range tt.nodes {
			if set != nil {
				set(&nodes[i])
			}
		}
		if got := Timeout(nodes, tt.q, tt.floor, tt.ceiling, tt.ceiling); absDiff(got, tt.want) > tt.want/100 {
			t.Errorf("%s: Timeout = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func repeat(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

func absDiff(a, b time.Duration) time.Duration {
	if a > b {
		return a - b
	}
	return b - a
}

// TestUsual: nothing is usual of a node before its first reply or after a
// call that timed out; after replies, its usual reply is what Wait says.
func TestUsual(t *testing.T) {
	var e Estimate
	if got := e.Usual(); got != 0 {
		t.Fatalf("Usual of a node never heard = %v, want 0", got)
	}
	for range 8 {
		e.Sample(2 * time.Millisecond)
	}
	if got, want := e.Usual(), 3*time.Millisecond; absDiff(got, want) > 100*time.Microsecond {
		t.Fatalf("Usual after steady 2 ms replies = %v, want about %v (the round trip and half again)", got, want)
	}
	if w, _ := e.Wait(); e.Usual() != w {
		t.Fatalf("Usual %v, Wait %v: want them equal while no call timed out", e.Usual(), w)
	}
	e.TimedOut(50 * time.Millisecond)
	if got := e.Usual(); got != 0 {
		t.Fatalf("Usual after a timed-out call = %v, want 0", got)
	}
	e.Sample(2 * time.Millisecond)
	if got := e.Usual(); got == 0 {
		t.Fatal("Usual after a reply following a timeout = 0, want the round trip's")
	}
}
