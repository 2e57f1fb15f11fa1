package main

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	replicaMain() // the replicas are this test binary, started again
	os.Exit(m.Run())
}

func TestOneLeaderAndTakeOvers(t *testing.T) {
	res, err := run(context.Background(), os.Stdout)
	if err != nil {
		t.Fatal(err)
	}
	if !res.ok() {
		t.Fatal(res.problem)
	}
	if len(res.terms) != 3 {
		t.Fatalf("terms %v, want three leaders", res.terms)
	}
	if res.runs == 0 {
		t.Fatal("the job never ran")
	}
}
