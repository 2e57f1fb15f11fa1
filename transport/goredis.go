package transport

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// GoRedis returns rdb as a Node: a *redis.Client, a *redis.ClusterClient
// (Info().Cluster) or another UniversalClient such as a Ring. Info's
// CutsAtDeadline is the client's ContextTimeoutEnabled; OneConnection
// holds for a *redis.Client; ID is rdb when rdb is comparable. A nil reply
// (redis.Nil) is the zero Reply.
func GoRedis(rdb redis.UniversalClient) Node {
	g := &goRedis{rdb: rdb}
	g.info.OneConnection = true
	switch v := rdb.(type) {
	case *redis.Client:
		g.info.Addr = v.Options().Addr
		g.info.CutsAtDeadline = v.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		addrs := slices.Clone(v.Options().Addrs)
		slices.Sort(addrs)
		g.info.Addr = strings.Join(addrs, ",")
		g.info.CutsAtDeadline = v.Options().ContextTimeoutEnabled
		g.info.Cluster, g.info.OneConnection = true, false
	default:
		g.info.OneConnection = false // a Ring routes by key
	}
	if reflect.TypeOf(rdb).Comparable() {
		g.info.ID = rdb
	}
	return g
}

type goRedis struct {
	rdb  redis.UniversalClient
	info Info
}

func (g *goRedis) Info() Info { return g.info }

func (g *goRedis) Do(ctx context.Context, cmds []Cmd, replies []Reply) {
	if len(cmds) == 1 {
		replies[0] = goRedisReply(g.rdb.Do(ctx, cmds[0]...))
		return
	}
	out := make([]*redis.Cmd, len(cmds))
	_, _ = g.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for i, c := range cmds {
			out[i] = pl.Do(ctx, c...)
		}
		return nil
	})
	for i, c := range out {
		replies[i] = goRedisReply(c)
	}
}

func goRedisReply(c *redis.Cmd) Reply {
	v, err := c.Result()
	if err == redis.Nil {
		return Reply{}
	}
	return Reply{Val: v, Err: err}
}

func (g *goRedis) PubSub() PubSub {
	return goRedisPubSub{g.rdb.Subscribe(context.Background())} // no channels yet: no connection yet
}

type goRedisPubSub struct{ ps *redis.PubSub }

func (p goRedisPubSub) Subscribe(ctx context.Context, channels ...string) error {
	return p.ps.Subscribe(ctx, channels...)
}

func (p goRedisPubSub) Unsubscribe(ctx context.Context, channels ...string) error {
	return p.ps.Unsubscribe(ctx, channels...)
}

func (p goRedisPubSub) Close() error { return p.ps.Close() }

func (p goRedisPubSub) Receive(ctx context.Context) (Message, error) {
	for {
		m, err := p.ps.Receive(ctx)
		if errors.Is(err, redis.ErrClosed) {
			return Message{}, ErrClosed
		}
		if err != nil {
			return Message{}, err
		}
		switch m := m.(type) {
		case *redis.Message:
			return Message{Kind: "message", Channel: m.Channel, Payload: m.Payload}, nil
		case *redis.Subscription:
			return Message{Kind: m.Kind, Channel: m.Channel}, nil
		}
		// a pong
	}
}
