package engine

import "slices"

// HolderName is the name acquire.lua gives the holder of a key that token
// holds: one more than a number made of its first 8 bytes, 6 bits each.
func HolderName(token string) int64 {
	var n int64
	for i := range min(8, len(token)) {
		n = n*64 + int64(token[i]%64)
	}
	return n + 1
}

// TokenStart is the first characters of the token that HolderName named
// name, when they are of newToken's alphabet (the root package's newToken: base32, A-Z and 2-7), else "".
func TokenStart(name int64) string {
	var b []byte
	for n := name - 1; n > 0; n /= 64 {
		switch d := byte(n % 64); {
		case d >= 1 && d <= 26:
			b = append(b, 'A'+d-1)
		case d >= '2' && d <= '7':
			b = append(b, d)
		default:
			return ""
		}
	}
	slices.Reverse(b)
	return string(b)
}

// Designated reports whether the attempt with token, whose round got t,
// is the one a split vote designates to go on: it holds a node, some node
// refused, every node that refused named its holder, and no holder has
// more nodes than it, nor as many with a lower name. (Without a refusal
// there is no split: another round asks only the nodes that refused.)
func Designated(t *Tally, token string) bool {
	if t.Yes == 0 {
		return false
	}
	mine := HolderName(token)
	held, ok := refusedBy(t, mine)
	if !ok || len(held) == 0 {
		return false
	}
	for name, n := range held {
		if n > t.Yes || n == t.Yes && name < mine {
			return false
		}
	}
	return true
}

// refusedBy counts the nodes that refused in t by the holder they named;
// ok is false when one named none (a lock of another kind names no token)
// or named mine.
func refusedBy(t *Tally, mine int64) (held map[int64]int, ok bool) {
	held = map[int64]int{}
	for i, a := range t.Answers {
		if a != HoldsNot {
			continue
		}
		name := t.Replies[i].Holder.Name
		if name == 0 || name == mine {
			return nil, false
		}
		held[name]++
	}
	return held, true
}
