-- Raises fencing counters to at least the given value; never lowers them.
-- KEYS: the fencing counters (one per locked key)
-- ARGV[1]: the value
-- Returns 1.
local n = tonumber(ARGV[1])
for _, k in ipairs(KEYS) do
  counter_raise(k, n)
end
return 1
