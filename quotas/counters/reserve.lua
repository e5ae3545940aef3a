-- KEYS: one counter per check. ARGV: now, slot, number of checks, then ARGS_PER_CHECK for
-- each check: limit, amount, ttl, lease (1/0), seed, skip parked (1/0). Answers {0, values...}
-- when every check passes (and adds to them all), else {failing check, its value}.
local now, slot, n = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local values = {}
for i = 1, n do
  local b = 3 + (i - 1) * ARGS_PER_CHECK
  local limit, amount = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2])
  local lease, seed = ARGV[b + 4] == '1', tonumber(ARGV[b + 5])
  local current
  if lease then
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
    current = redis.call('ZCARD', KEYS[i])
    if ARGV[b + 6] == '1' then  -- leave out the leases of batch calls waiting in a queue
      local parked = KEYS[i] .. ':parked'
      redis.call('ZREMRANGEBYSCORE', parked, '-inf', now)
      current = math.max(0, current - redis.call('ZCARD', parked))
    end
    amount = 1
  else
    current = tonumber(redis.call('GET', KEYS[i]) or seed)
  end
  if current + amount > limit then return {i, tostring(current)} end
  values[i] = tostring(current + amount)
end
for i = 1, n do
  local b = 3 + (i - 1) * ARGS_PER_CHECK
  local ttl = tonumber(ARGV[b + 3])
  if ARGV[b + 4] == '1' then
    redis.call('ZADD', KEYS[i], now + ttl, slot)
    redis.call('EXPIRE', KEYS[i], math.ceil(ttl * 2))
  else
    if redis.call('EXISTS', KEYS[i]) == 0 then
      redis.call('SET', KEYS[i], ARGV[b + 5], 'EX', math.ceil(ttl))
    end
    redis.call('INCRBYFLOAT', KEYS[i], ARGV[b + 2])
  end
end
return {0, unpack(values)}
