-- KEYS: state, slots, budget, held, batch slots, interactive queue, batch queue, waiters,
-- members waiting (interactive), members waiting (batch), service counters, waiters last
-- heard of (each worker's sweep vouches for its own every second: a dead worker's waiters
-- fall silent and are passed over), preemptible batch slots (by grant time), slots asked
-- back for a waiting interactive call and not yet released, demand counters.
-- ARGV[1..6]: now, key base (for each member's own queue), grant channel, max concurrency,
-- lease, reserve; then each script's own.
local now, base, channel = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local maxc, lease, reserve = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local K_STATE, K_SLOTS, K_BUDGET, K_HELD, K_BATCH = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local K_QUEUE = {interactive = KEYS[6], batch = KEYS[7]}
local K_WAITER = KEYS[8]
local K_MEMBERS = {interactive = KEYS[9], batch = KEYS[10]}
local K_SERVICE, K_HEARD = KEYS[11], KEYS[12]
local K_PREEMPTIBLE, K_PREEMPTING, K_DEMAND = KEYS[13], KEYS[14], KEYS[15]

local function split(text)
  local out = {}
  for part in string.gmatch(text, '([^|]*)|?') do out[#out + 1] = part end
  return out
end

local function member_queue(class, member) return base .. ':wq:' .. class .. ':' .. member end

-- A member's recent service or demand (rules.recent): "value|when charged", halved every
-- half-life.
local function recent_in(key, member)
  local v = redis.call('HGET', key, member)
  if not v then return 0 end
  local sep = string.find(v, '|', 1, true)
  if not sep then return tonumber(v) end
  local value, at = tonumber(string.sub(v, 1, sep - 1)), tonumber(string.sub(v, sep + 1))
  return value * 2 ^ (-math.max(0, now - at) / SERVICE_HALF_LIFE)
end

local function service_of(member) return recent_in(K_SERVICE, member) end

local function charge(member, amount)
  redis.call('HSET', K_SERVICE, member, (service_of(member) + amount) .. '|' .. ARGV[1])
end

-- A member asks the deployment for a slot: its demand (rules.loudest) counts one more call.
local function ask(member)
  redis.call('HSET', K_DEMAND, member, (recent_in(K_DEMAND, member) + 1) .. '|' .. ARGV[1])
end

local function state()
  local st = redis.call('HMGET', K_STATE, 'mode', 'open_until', 'half_successes', 'limit')
  return st[1] or 'closed', tonumber(st[2] or '0'), tonumber(st[3] or '0'),
         math.min(tonumber(st[4] or maxc), maxc)
end

local function allowed_slots()
  local mode, open_until, half, limit = state()
  if mode == 'open' then return 0 end
  local allowed = math.floor(limit)
  if mode == 'half_open' then allowed = math.min(allowed, 1 + half) end
  return allowed
end

-- Seconds of deadline a call needs left to be sent (rules.need; 0 before any answer).
local function need()
  local st = redis.call('HMGET', K_STATE, 'latency', 'deviation')
  local latency, deviation = tonumber(st[1] or '0'), tonumber(st[2] or '0')
  if latency <= 0 then return 0 end
  return latency + NEED_DEVIATIONS * deviation
end

-- Waiters served before a newcomer of `class`: its class, and for batch interactive too.
local function ahead_of(class)
  local ahead = redis.call('ZCARD', K_QUEUE[class])
  if class == 'batch' then ahead = ahead + redis.call('ZCARD', K_QUEUE.interactive) end
  return ahead
end

-- The loud member (rules.loudest): of the members active here the one asking for the most
-- calls, when that is LOUD_FACTOR times the average or more and beyond its share of the
-- slots.
local function loud_member(allowed)
  local active, n = {}, 0
  local function seen(m)
    if not active[m] then active[m], n = recent_in(K_DEMAND, m), n + 1 end
  end
  local asked = redis.call('HGETALL', K_DEMAND)
  for i = 1, #asked, 2 do
    local sep = string.find(asked[i + 1], '|', 1, true)
    if sep and tonumber(string.sub(asked[i + 1], sep + 1)) >= now - ACTIVE_WITHIN then
      seen(asked[i])
    end
  end
  local holders = redis.call('HVALS', K_HELD)
  for i = 1, #holders do seen(split(holders[i])[2]) end
  for _, class in ipairs({'interactive', 'batch'}) do
    local members = redis.call('HKEYS', K_MEMBERS[class])
    for i = 1, #members do seen(members[i]) end
  end
  if n < 2 then return nil end
  local top, total = nil, 0
  for m, s in pairs(active) do
    total = total + s
    if top == nil or s > active[top] then top = m end
  end
  local hold = tonumber(redis.call('HGET', K_STATE, 'hold') or DEFAULT_HOLD)
  -- A steady rate r summed with a half-life h comes to r * h / ln 2.
  local slots = active[top] * math.log(2) / SERVICE_HALF_LIFE * hold
  if active[top] >= LOUD_FACTOR * total / n and slots > allowed / n then return top end
  return nil
end

-- Waiters fair share serves before the next call of `member` (its own included): of its
-- class, those of members with less service (or as much and fewer calls waiting) but the
-- loud member's, which wait for more than the headroom; for batch every interactive one
-- too (local.py's _served_before).
local function served_before(class, member)
  local loud = loud_member(allowed_slots())
  local mine = service_of(member)
  local mine_waiting = tonumber(redis.call('HGET', K_MEMBERS[class], member) or '0')
  local counts = redis.call('HGETALL', K_MEMBERS[class])
  local ahead = 0
  for i = 1, #counts, 2 do
    local m, n = counts[i], tonumber(counts[i + 1])
    local s = service_of(m)
    if m == member or (m ~= loud and (s < mine or (s == mine and n < mine_waiting))) then
      ahead = ahead + n
    end
  end
  if class == 'batch' then ahead = ahead + redis.call('ZCARD', K_QUEUE.interactive) end
  return ahead
end

-- slot_policy.expected_wait: the queue drains `allowed` calls every `hold` seconds.
local function expected_wait(ahead, allowed)
  local hold = tonumber(redis.call('HGET', K_STATE, 'hold') or DEFAULT_HOLD)
  return (ahead + 1) / math.max(1, allowed) * math.max(hold, MIN_HOLD)
end

local function batch_cap(allowed)
  if allowed <= 0 then return 0 end
  local kept = math.max(0, math.min(allowed - 1, math.ceil(allowed * reserve - RESERVE_EPSILON)))
  return allowed - kept
end

local function count_attempt(retry)
  local bucket = math.floor(now / BUDGET_WIDTH)
  redis.call('HINCRBY', K_BUDGET, (retry and 'r:' or 'f:') .. bucket, 1)
  local stale = {}
  for b = bucket - 2 * BUDGET_BUCKETS, bucket - BUDGET_BUCKETS do
    stale[#stale + 1] = 'f:' .. b
    stale[#stale + 1] = 'r:' .. b
  end
  redis.call('HDEL', K_BUDGET, unpack(stale))
  redis.call('EXPIRE', K_BUDGET, math.ceil(BUDGET_WIDTH * BUDGET_BUCKETS * 2))
end

local function purge_expired_slots()
  local expired = redis.call('ZRANGEBYSCORE', K_SLOTS, '-inf', now)
  for i = 1, #expired do
    redis.call('ZREM', K_SLOTS, expired[i])
    redis.call('ZREM', K_BATCH, expired[i])
    redis.call('HDEL', K_HELD, expired[i])
    redis.call('ZREM', K_PREEMPTIBLE, expired[i])
    redis.call('SREM', K_PREEMPTING, expired[i])
  end
end

-- waiter info: class|member|until|estimate|retry|preemptible|deadline
local function remove_waiter(slot)
  local info = redis.call('HGET', K_WAITER, slot)
  if not info then return nil end
  local w = split(info)
  local class, member = w[1], w[2]
  redis.call('HDEL', K_WAITER, slot)
  redis.call('ZREM', K_HEARD, slot)
  redis.call('ZREM', K_QUEUE[class], slot)
  redis.call('ZREM', member_queue(class, member), slot)
  if redis.call('HINCRBY', K_MEMBERS[class], member, -1) <= 0 then
    redis.call('HDEL', K_MEMBERS[class], member)
  end
  return w
end

-- Waiters whose worker fell silent (it died, e.g. a runner killed with its calls queued):
-- out of the queues, so that no count of calls waiting or ahead includes them. Counted they
-- would hold a deployment's batch spare at nothing, and with no call sent nothing else
-- would ever pass over them.
local function purge_silent()
  local silent = redis.call('ZRANGEBYSCORE', K_HEARD, '-inf', now - SILENCE)
  for i = 1, #silent do
    if not remove_waiter(silent[i]) then redis.call('ZREM', K_HEARD, silent[i]) end
  end
end

local function join(slot, class, member, until_, estimate, retry, preemptible, deadline)
  redis.call('HSET', K_WAITER, slot,
             table.concat({class, member, until_, estimate, retry and '1' or '0',
                           preemptible and '1' or '0', deadline}, '|'))
  redis.call('ZADD', K_QUEUE[class], now, slot)
  redis.call('ZADD', K_HEARD, now, slot)
  redis.call('ZADD', member_queue(class, member), now, slot)
  redis.call('EXPIRE', member_queue(class, member), STATE_TTL)
  redis.call('HINCRBY', K_MEMBERS[class], member, 1)
end

-- The member's oldest live waiter in a class (dropping the ones whose time ran out, those
-- whose deadline ends before `latest`: too late to finish, and those of a worker gone
-- silent).
local function oldest_of(class, member, latest)
  local q = member_queue(class, member)
  while true do
    local first = redis.call('ZRANGE', q, 0, 0, 'WITHSCORES')
    if #first == 0 then return nil end
    local info = redis.call('HGET', K_WAITER, first[1])
    local heard = tonumber(redis.call('ZSCORE', K_HEARD, first[1]) or '0')
    if info then
      local w = split(info)
      if tonumber(w[3]) >= now and tonumber(w[7]) >= latest and heard >= now - SILENCE then
        return first[1], tonumber(first[2])
      end
    end
    if info then remove_waiter(first[1]) else redis.call('ZREM', q, first[1]) end
  end
end

local function less(a, b)  -- lexicographic, for sort keys
  for k = 1, #a do
    if a[k] ~= b[k] then return a[k] < b[k] end
  end
  return false
end

-- rules.headroom: FAIR_HEADROOM, at most a share of the limit, none for a small one
local function headroom(allowed)
  if allowed < HEADROOM_FROM then return 0 end
  return math.min(FAIR_HEADROOM, math.floor(allowed * HEADROOM_SHARE))
end

-- The member kept off the last free slots (slot_policy rule 7): the loud member, with at
-- most the headroom free.
local function loudest(allowed)
  if allowed < HEADROOM_FROM then return nil end
  if allowed - redis.call('ZCARD', K_SLOTS) > headroom(allowed) then return nil end
  return loud_member(allowed)
end

-- Least service first; ties to the member with the fewest calls waiting, then the longest
-- wait (slot_policy rule 2); not the member `kept_off` (and then whether one of theirs
-- waits).
local function fairest(class, latest, kept_off)
  local best, best_key, blocked = nil, nil, false
  local counts = redis.call('HGETALL', K_MEMBERS[class])
  for i = 1, #counts, 2 do
    local slot, since = oldest_of(class, counts[i], latest)
    if slot and counts[i] == kept_off then slot, blocked = nil, true end
    if slot then
      local key = {service_of(counts[i]), tonumber(counts[i + 1]), since}
      if best == nil or less(key, best_key) then best, best_key = slot, key end
    end
  end
  return best, blocked
end

local function anyone_waits()
  return redis.call('HLEN', K_MEMBERS.interactive) > 0 or redis.call('HLEN', K_MEMBERS.batch) > 0
end

-- The slot is the caller's. `handed`: it is one a preempted call just gave back (its
-- upstream may not have seen the cancel yet).
local function hold(slot, class, member, estimate, retry, preemptible, handed)
  redis.call('ZADD', K_SLOTS, now + lease, slot)
  if class == 'batch' then redis.call('ZADD', K_BATCH, now + lease, slot) end
  if class == 'batch' and preemptible then redis.call('ZADD', K_PREEMPTIBLE, now, slot) end
  redis.call('HSET', K_HELD, slot,
             table.concat({class, member, estimate, now, handed and '1' or '0'}, '|'))
  charge(member, estimate)
  count_attempt(retry)
end

local function grant(slot, handed)
  local w = remove_waiter(slot)
  hold(slot, w[1], w[2], tonumber(w[4]), w[5] == '1', w[6] == '1', handed)
end

-- Whether a newcomer of `class` would be granted at once with nothing to weigh (local.py's
-- _free_for): nobody waits, more slots are free than the headroom kept from the loudest
-- member, and batch is under its cap. The dispatch would grant it the same slot; most
-- calls find a deployment like this, and skip joining the queues only to leave them.
local function free_for(class)
  if anyone_waits() then return false end
  purge_expired_slots()
  local allowed = allowed_slots()
  if allowed - redis.call('ZCARD', K_SLOTS) <= headroom(allowed) then return false end
  return class ~= 'batch' or redis.call('ZCARD', K_BATCH) < batch_cap(allowed)
end

-- When the deployment is full, ask back the youngest preemptible batch slots, one for each
-- waiting interactive request that no slot asked back yet covers (slot_policy rule 5).
-- After a dispatch, and not for a request that only asked for a free slot (it waits
-- nowhere), nor while the breaker is open (a slot given back could go to nobody).
local function preempt_if_full()
  if redis.call('ZCARD', K_QUEUE.interactive) == 0 then return end  -- nobody to make room for
  local allowed = allowed_slots()
  if allowed == 0 or redis.call('ZCARD', K_SLOTS) < allowed then return end
  local wanted = redis.call('ZCARD', K_QUEUE.interactive) - redis.call('SCARD', K_PREEMPTING)
  if wanted <= 0 then return end
  local youngest = redis.call('ZREVRANGE', K_PREEMPTIBLE, 0, wanted - 1)
  if #youngest == 0 then return end
  for i = 1, #youngest do
    redis.call('ZREM', K_PREEMPTIBLE, youngest[i])
    redis.call('SADD', K_PREEMPTING, youngest[i])
  end
  redis.call('PUBLISH', channel .. ':preempt', table.concat(youngest, ' '))
end

-- Grant free slots while an eligible request waits; publish who got one (but `quiet`);
-- `handed`: the first free slot is one a preempted call just gave back.
local function dispatch(quiet, handed)
  local mode, open_until = state()
  if mode == 'open' then
    if now < open_until then return {} end
    redis.call('HSET', K_STATE, 'mode', 'half_open', 'half_successes', 0)
  end
  purge_expired_slots()
  purge_silent()
  if not anyone_waits() then return {} end
  local allowed = allowed_slots()
  local latest = now + need()  -- a waiter whose deadline is sooner could not finish
  local granted, woken = {}, {}
  while redis.call('ZCARD', K_SLOTS) < allowed do
    local slot = nil
    local kept_off, blocked = loudest(allowed), false
    if redis.call('HLEN', K_MEMBERS.interactive) > 0 then
      slot, blocked = fairest('interactive', latest, kept_off)
    end
    if blocked and not slot then break end  -- batch neither: it would pass that call
    if not slot and redis.call('HLEN', K_MEMBERS.batch) > 0
       and redis.call('ZCARD', K_BATCH) < batch_cap(allowed) then
      slot = fairest('batch', latest, kept_off)
    end
    if not slot then break end
    grant(slot, handed)
    handed = false
    granted[#granted + 1] = slot
    if slot ~= quiet then woken[#woken + 1] = slot end
  end
  if #woken > 0 then redis.call('PUBLISH', channel, table.concat(woken, ' ')) end
  return granted
end

-- The keys live STATE_TTL from the deployment's last use: renewed at most every KEEP_EVERY
-- seconds (fifteen EXPIREs on every script were a quarter of a call's time in Redis), so a
-- key made in between has none until then. Every time while the clocks of the workers
-- disagree (a time ahead of this one's was written).
local function keep(ttl)
  local kept = tonumber(redis.call('HGET', K_STATE, 'kept') or '0')
  if kept <= now and now - kept < KEEP_EVERY then return end
  redis.call('HSET', K_STATE, 'kept', ARGV[1])
  for i = 1, #KEYS do redis.call('EXPIRE', KEYS[i], ttl) end
end
