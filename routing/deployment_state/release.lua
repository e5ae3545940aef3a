-- ARGV[7..]: slot, result, threshold, cooldown, close after, service ('' when unknown),
-- repeat ('1': the call reached this deployment before), took (seconds to the answer's
-- head, or until the call's deadline cut it; '' when unknown). Returns 1, or 2 when
-- congested.
local slot, result = ARGV[7], ARGV[8]
local threshold, cooldown, close_after = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local service, repeat_, took = tonumber(ARGV[12]), ARGV[13] == '1', tonumber(ARGV[14])
if result == 'deadline' then  -- a failure only if it hung (rules.cut_was_a_hang)
  local needed = need()
  local hung = took ~= nil and needed > 0 and took >= HANG_FACTOR * needed
  result = hung and 'failure' or 'neutral'
end
redis.call('ZREM', K_SLOTS, slot)
redis.call('ZREM', K_BATCH, slot)
redis.call('ZREM', K_PREEMPTIBLE, slot)
local handing = redis.call('SREM', K_PREEMPTING, slot) == 1  -- a preempted call gives it back
local held = redis.call('HGET', K_HELD, slot)
local since = now
local congested = false
if held then
  redis.call('HDEL', K_HELD, slot)
  local h = split(held)
  since = tonumber(h[4])
  if result == 'capacity' and h[5] == '1' then
    -- The upstream had not yet seen the preempted call's cancel: not congestion.
    result, congested = 'neutral', true
  end
  if result == 'success' then
    local hold = tonumber(redis.call('HGET', K_STATE, 'hold') or DEFAULT_HOLD)
    redis.call('HSET', K_STATE, 'hold', (1 - HOLD_WEIGHT) * hold + HOLD_WEIGHT * math.max(0, now - since))
    if took then  -- rules.next_latency
      took = math.max(0, took)
      local st = redis.call('HMGET', K_STATE, 'latency', 'deviation')
      local latency, deviation = tonumber(st[1] or '0'), tonumber(st[2] or '0')
      if latency <= 0 then
        latency, deviation = took, took / 2
      else
        deviation = (1 - DEVIATION_WEIGHT) * deviation + DEVIATION_WEIGHT * math.abs(took - latency)
        latency = (1 - LATENCY_WEIGHT) * latency + LATENCY_WEIGHT * took
      end
      redis.call('HSET', K_STATE, 'latency', latency, 'deviation', deviation)
    end
  end
  if service then charge(h[2], service - tonumber(h[3])) end
end
if result ~= 'neutral' then
  local st = redis.call('HMGET', K_STATE, 'mode', 'failures', 'half_successes', 'limit',
                        'streak', 'reason', 'open_until', 'cut_at', 'opens', 'raised_from')
  local mode, reason = st[1] or 'closed', st[6] or ''
  local failures, half = tonumber(st[2] or '0'), tonumber(st[3] or '0')
  local limit = math.min(tonumber(st[4] or maxc), maxc)
  local streak, open_until = tonumber(st[5] or '0'), tonumber(st[7] or '0')
  local cut_at, opens = tonumber(st[8] or '0'), tonumber(st[9] or '0')
  local raised_from = tonumber(st[10] or '0')
  if result == 'success' then
    failures = 0
    if mode == 'half_open' then
      half = half + 1
      if half >= close_after then mode, reason, opens = 'closed', '', 0 end
    end
    streak = streak + 1
    if streak >= math.floor(limit) then
      raised_from = limit
      limit, streak = math.min(maxc, limit + 1), 0
    end
  else
    local counts = not repeat_
    if result == 'capacity' and mode == 'closed' then
      if since < cut_at then
        congested = true
      elseif limit > FLOOR then
        -- rules.after_capacity_error: back to where the last raise began, else the cut
        if raised_from > 0 and raised_from < limit then
          limit = raised_from
        else
          limit = math.max(FLOOR, math.min(limit - 1, math.floor(limit * CUT + 0.5)))
        end
        cut_at, streak, raised_from = now, 0, 0
        congested = true
      end
      if congested then counts = false end
    end
    if counts then failures = failures + 1 end
    if threshold > 0 and (result == 'misconfigured' or mode == 'half_open'
                          or (counts and failures >= threshold)) then
      -- rules.open_time: short at first, doubling per opening, up to the cooldown
      open_until = now + math.min(cooldown, FIRST_OPEN * 2 ^ math.min(opens, DOUBLINGS))
      mode, failures, half, reason, opens = 'open', 0, 0, result, opens + 1
    end
  end
  redis.call('HSET', K_STATE, 'mode', mode, 'failures', failures, 'half_successes', half,
             'limit', limit, 'streak', streak, 'reason', reason, 'open_until', open_until,
             'cut_at', cut_at, 'opens', opens, 'raised_from', raised_from)
end
dispatch(nil, handing)
preempt_if_full()
keep(STATE_TTL)
return congested and 2 or 1
