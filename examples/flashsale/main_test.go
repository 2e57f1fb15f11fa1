package main

import (
	"context"
	"fmt"
	"testing"
)

func TestSale(t *testing.T) {
	for _, cfg := range []config{
		{stock: 60, buyers: 8, segments: 1, killAfter: 20},
		{stock: 60, buyers: 8, segments: 4, killAfter: 20},
		{stock: 60, buyers: 8, segments: 1, killAfter: 20, fenced: true},
	} {
		t.Run(fmt.Sprintf("segments=%d,fenced=%v", cfg.segments, cfg.fenced), func(t *testing.T) {
			r, err := run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if r.Orders != cfg.stock || r.Left != 0 || r.Oversold != 0 || !r.NodesDied {
				t.Fatalf("%+v: want every item sold once, through the death of 2 lock nodes", r)
			}
		})
	}
}
