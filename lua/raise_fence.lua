-- Raises fencing (or ticket) counters to at least the given value; never
-- lowers them.
-- KEYS: the counters (one per locked key)
-- ARGV[1]: the value
-- ARGV[2]: how long (ms) a counter is kept once the node's clock has passed
--          its value: the larger of the lock's ttl and the fence horizon
--          (WithFenceHorizon; see counter_set in prelude.lua)
-- Returns 1.
local n = tonumber(ARGV[1])
for _, k in ipairs(KEYS) do
  counter_raise(k, n, ARGV[2])
end
return 1
