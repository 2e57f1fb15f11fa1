-- Fencing and ticket counters, put before every script that draws or raises
-- one (see counters in scripts.go). A counter's next value is one more than
-- its last, or the node's clock in microseconds when that is more; every
-- draw and raise sets it to expire HORIZON_MS later. A counter that expired
-- (no lock taken on its key for that long) starts again from the clock,
-- which has passed every value it gave unless it ran behind another node's
-- clock, or stepped back, by more than the horizon. The values stay below
-- 2^53 (the clock until the year 2255), exact in Lua's numbers.
-- counter_draw also returns whether the value is the clock's (rather than
-- one more than the last, which is ahead of the clock); counter_next
-- returns the value alone.
local function counter_draw(k)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local n = math.max(tonumber(redis.call('GET', k) or '0') + 1, now)
  redis.call('SET', k, string.format('%d', n), 'PX', HORIZON_MS)
  return n, n == now
end

local function counter_next(k)
  return (counter_draw(k))
end

-- counter_raise sets counter k to at least n; never lowers it.
local function counter_raise(k, n)
  if tonumber(redis.call('GET', k) or '0') < n then
    redis.call('SET', k, string.format('%d', n), 'PX', HORIZON_MS)
  end
end

