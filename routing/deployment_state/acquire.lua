-- ARGV[7..]: retry, slot, retry ratio, retry floor, priority, member, estimate, wait until,
-- preemptible
local retry, slot = ARGV[7] == '1', ARGV[8]
local ratio, floor_ = tonumber(ARGV[9]), tonumber(ARGV[10])
local class, member, estimate = ARGV[11], ARGV[12], tonumber(ARGV[13])
local wait_until, preemptible = tonumber(ARGV[14]), ARGV[15] == '1'
local mode, open_until = state()
if mode == 'open' and now < open_until then
  return {0, 'breaker', tostring(open_until - now), redis.call('HGET', K_STATE, 'reason') or ''}
end
if retry then
  local bucket = math.floor(now / BUDGET_WIDTH)
  local fields = {}
  for b = bucket - BUDGET_BUCKETS + 1, bucket do
    fields[#fields + 1] = 'f:' .. b
    fields[#fields + 1] = 'r:' .. b
  end
  local counts = redis.call('HMGET', K_BUDGET, unpack(fields))
  local firsts, retries = 0, 0
  for i = 1, #counts, 2 do
    firsts = firsts + tonumber(counts[i] or '0')
    retries = retries + tonumber(counts[i + 1] or '0')
  end
  if retries >= math.max(floor_, ratio * firsts) then return {0, 'budget', '0'} end
end
local position = redis.call('ZCARD', K_QUEUE[class])
-- As sent: a number turned back into text keeps 14 digits, and could fall before `now`.
join(slot, class, member, wait_until > now and ARGV[14] or ARGV[1], estimate, retry, preemptible)
dispatch(slot)
keep(STATE_TTL)
if redis.call('ZSCORE', K_SLOTS, slot) then return {1, '', '0'} end
if wait_until > now then
  preempt_if_full()
  return {0, 'queued', tostring(position)}
end
remove_waiter(slot)
mode = state()
if mode == 'half_open' then
  return {0, 'breaker', '0', redis.call('HGET', K_STATE, 'reason') or ''}
end
return {0, 'concurrency', '0'}
