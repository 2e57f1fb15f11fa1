package wait

import (
	"testing"

	"github.com/quorumlock/redlock/internal/engine"
	"github.com/quorumlock/redlock/transport"
)

// TestListenNode: a waiter listens on a node that named a holder, one
// whose releases are heard when there is one, the same for one key.
func TestListenNode(t *testing.T) {
	h, n, f := engine.HoldsNot, engine.Holds, engine.Failed
	for _, c := range []struct {
		name     string
		channels []string
		answers  []engine.Answer
		deaf     func(int) bool
		want     []int // any of these
	}{
		{"no channel", nil, []engine.Answer{h, h, h}, nil, []int{-1}},
		{"no holder named", []string{"c"}, []engine.Answer{n, f, n}, nil, []int{-1}},
		{"the one that named it", []string{"c"}, []engine.Answer{n, h, f}, nil, []int{1}},
		{"one of those that named it", []string{"c"}, []engine.Answer{h, n, h}, nil, []int{0, 2}},
		{"not a deaf one", []string{"c"}, []engine.Answer{h, n, h}, func(i int) bool { return i == 0 }, []int{2}},
		{"a deaf one when all are", []string{"c"}, []engine.Answer{h, n, n}, func(int) bool { return true }, []int{0}},
	} {
		got := ListenNode(c.channels, c.answers, c.deaf)
		ok := false
		for _, w := range c.want {
			ok = ok || got == w
		}
		if !ok || got != ListenNode(c.channels, c.answers, c.deaf) {
			t.Errorf("%s: node %d, want one of %v, the same each time", c.name, got, c.want)
		}
	}
}

// TestWatch_heard: what an announcement tells a waiter: its own channel
// wakes it; a queue's names the first in line, whom alone it sends on.
func TestWatch_heard(t *testing.T) {
	w := &Watch{own: "rel:me"}
	named := func(p string) Naming {
		switch p {
		case "":
			return NamedNobody
		case "me":
			return NamedUs
		}
		return NamedAnother
	}
	for _, c := range []struct {
		name                 string
		m                    transport.Message
		named                func(string) Naming
		waitOn, first, woken bool
	}{
		{"its own channel", transport.Message{Channel: "rel:me"}, nil, false, false, true},
		{"a release, not in a queue", transport.Message{Channel: "rel"}, nil, false, false, true},
		{"a queue's, naming it", transport.Message{Channel: "rel", Payload: "me"}, named, false, true, false},
		{"a queue's, naming another", transport.Message{Channel: "rel", Payload: "other"}, named, true, false, false},
		{"a queue's, naming nobody", transport.Message{Channel: "rel"}, named, false, false, false},
	} {
		waitOn, first, woken := w.heard(c.m, c.named)
		if waitOn != c.waitOn || first != c.first || woken != c.woken {
			t.Errorf("%s: waitOn, first, woken = %v, %v, %v; want %v, %v, %v", c.name, waitOn, first, woken, c.waitOn, c.first, c.woken)
		}
	}
}
