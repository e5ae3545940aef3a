-- KEYS: one counter per check. ARGV: now, slot, number of checks, then ARGS_PER_CHECK for
-- each check: limit, amount, ttl, lease (1/0), seed, skip parked (1/0); then the ledger of
-- pending reservations (a sorted set, '' for none) and this reservation's deadline in it;
-- then the set of workers that reserve here, this worker, and since when a worker that
-- reserved counts as live. Answers {0, values..., live workers} when every check passes
-- (and adds to them all), else {failing check, its value, live workers}.
--
-- The ledger (ledger.lua): a reservation's amounts wait there, by slot, with the worker
-- that made it, until the call settles; the worker renews the deadline while the call
-- runs. A slot past its deadline belonged to a worker that died (or was cut off that long):
-- it is taken back here, before any check reads the counters. A starting worker takes
-- back at once what ended workers of its own host left (take_back.lua).
local now, slot, n = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local ledger = ARGV[4 + n * ARGS_PER_CHECK]
local deadline = tonumber(ARGV[5 + n * ARGS_PER_CHECK])
-- Who reserves here: each worker's share of a limit while Redis is away (shares.py).
local workers_key, worker = ARGV[6 + n * ARGS_PER_CHECK], ARGV[7 + n * ARGS_PER_CHECK]
redis.call('ZADD', workers_key, now, worker)
redis.call('ZREMRANGEBYSCORE', workers_key, '-inf', '(' .. ARGV[8 + n * ARGS_PER_CHECK])
redis.call('EXPIRE', workers_key, LEDGER_KEEP)
local live = redis.call('ZCARD', workers_key)
if ledger ~= '' then
  for _, dead in ipairs(redis.call('ZRANGEBYSCORE', ledger, '-inf', now, 'LIMIT', 0, SWEEP_BATCH)) do
    take_back(ledger, dead)
  end
end
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
  if current + amount > limit then return {i, tostring(current), live} end
  values[i] = tostring(current + amount)
end
local pending = false
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
    if ledger ~= '' and tonumber(ARGV[b + 2]) > 0 then
      redis.call('HSET', ledger .. ':' .. slot, KEYS[i], ARGV[b + 2])
      pending = true
    end
  end
end
if pending then
  redis.call('HSET', ledger .. ':' .. slot, WORKER_FIELD, worker)
  redis.call('EXPIRE', ledger .. ':' .. slot, LEDGER_KEEP)
  redis.call('ZADD', ledger, deadline, slot)
  redis.call('EXPIRE', ledger, LEDGER_KEEP)
end
values[#values + 1] = live
return {0, unpack(values)}
