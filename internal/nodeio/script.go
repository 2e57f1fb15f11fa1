package nodeio

import (
	"crypto/sha1"
	"encoding/hex"

	"github.com/quorumlock/redlock/transport"
)

// Script is a Lua script, sent as EVALSHA by its SHA1 once a node holds
// it, else as EVAL with its text.
type Script struct {
	// src and sha are the text and the SHA1 as arguments, boxed once
	// rather than at every call
	src, sha any
}

// NewScript returns src as a Script.
func NewScript(src string) *Script {
	sum := sha1.Sum([]byte(src))
	return &Script{src: src, sha: hex.EncodeToString(sum[:])}
}

// eval is the command that runs s on keys with args: EVALSHA, or EVAL with
// the script's text when text is true.
func (s *Script) eval(text bool, keys []string, args []any) transport.Cmd {
	cmd := make(transport.Cmd, 0, 3+len(keys)+len(args))
	if text {
		cmd = append(cmd, "eval", s.src, len(keys))
	} else {
		cmd = append(cmd, "evalsha", s.sha, len(keys))
	}
	for _, k := range keys {
		cmd = append(cmd, k)
	}
	return append(cmd, args...)
}
