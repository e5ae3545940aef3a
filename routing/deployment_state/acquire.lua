-- ARGV[7..]: retry, slot, retry ratio, retry floor, priority, member, estimate, wait until,
-- preemptible, deadline (epoch seconds the answer is due by; 0: none)
local retry, slot = ARGV[7] == '1', ARGV[8]
local ratio, floor_ = tonumber(ARGV[9]), tonumber(ARGV[10])
local class, member, estimate = ARGV[11], ARGV[12], tonumber(ARGV[13])
local wait_until, preemptible = tonumber(ARGV[14]), ARGV[15] == '1'
local deadline = tonumber(ARGV[16])
if deadline <= 0 then deadline = math.huge end
local mode, open_until = state()
if mode == 'open' and now < open_until then
  return {0, 'breaker', tostring(open_until - now), redis.call('HGET', K_STATE, 'reason') or ''}
end
purge_silent()
-- Only while the deadline covers the deployment's latency (slot_policy rule 6).
local latest = deadline - need()
if latest < now then
  local wait = expected_wait(ahead_of(class), allowed_slots())
  return {0, 'deadline', tostring(math.max(1, math.ceil(wait)))}
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
-- As sent: a number turned back into text keeps 14 digits, and could fall before `now`.
local until_ = wait_until > now and ARGV[14] or ARGV[1]
if latest < tonumber(until_) then until_ = string.format('%.6f', latest) end
local due = deadline == math.huge and 'inf' or ARGV[16]
ask(member)
if mode ~= 'open' and free_for(class) then  -- an open breaker past its time: dispatch
  hold(slot, class, member, estimate, retry, preemptible, false)
  keep(STATE_TTL)
  return {1, '', '0'}
end
local position = redis.call('ZCARD', K_QUEUE[class])
join(slot, class, member, until_, estimate, retry, preemptible, due)
dispatch(slot)
keep(STATE_TTL)
if redis.call('ZSCORE', K_SLOTS, slot) then return {1, '', '0'} end
local room = tonumber(until_) - now
if room > 0 then
  -- Fair share serves at most everyone waiting first (ahead_of): when even that wait fits
  -- the room, the exact count (the loud member, every member's service) is not needed.
  local allowed = allowed_slots()
  local wait = expected_wait(ahead_of(class) - 1, allowed)  -- not itself
  if wait > room then wait = expected_wait(served_before(class, member) - 1, allowed) end
  if wait <= room then
    preempt_if_full()
    return {0, 'queued', tostring(position), until_}
  end
  -- Refused at arrival: the queue would not reach it in time. Retry-After: when the calls
  -- now ahead of it, beyond what it could wait, are served.
  remove_waiter(slot)
  return {0, 'deadline', tostring(math.max(1, math.ceil(wait - room)))}
end
remove_waiter(slot)
mode = state()
if mode == 'half_open' then
  return {0, 'breaker', '0', redis.call('HGET', K_STATE, 'reason') or ''}
end
return {0, 'concurrency', '0'}
