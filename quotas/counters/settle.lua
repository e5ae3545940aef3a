-- KEYS: the counters to adjust, then the leases to free. ARGV: number of counters, slot,
-- one delta per counter. A counter never goes below 0; one Redis lost is left unset.
local n = tonumber(ARGV[1])
for i = 1, n do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    if tonumber(redis.call('INCRBYFLOAT', KEYS[i], ARGV[i + 2])) < 0 then
      redis.call('SET', KEYS[i], 0, 'KEEPTTL')
    end
  end
end
for i = n + 1, #KEYS do
  redis.call('ZREM', KEYS[i], ARGV[2])
  redis.call('ZREM', KEYS[i] .. ':parked', ARGV[2])
end
return 1
