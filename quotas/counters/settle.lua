-- KEYS: the counters to adjust, then the leases to free. ARGV: number of counters, slot,
-- one delta per counter, the ledger of pending reservations ('' for none), then what was
-- reserved on each counter. A counter never goes below 0; one Redis lost is left unset.
-- A reservation the ledger swept (its worker seemed dead) was already taken back, so
-- what was reserved is added back to the delta: the counter ends charged what was used.
-- A slot the ledger holds neither pending nor swept was settled already: this is the same
-- settle sent again (its first answer was lost on the way back), so the counters are left
-- as they are.
local n = tonumber(ARGV[1])
local slot, ledger = ARGV[2], ARGV[n + 3]
local swept, settled = false, false
if ledger ~= '' then
  if redis.call('ZREM', ledger, slot) == 1 then
    redis.call('DEL', ledger .. ':' .. slot)
  elseif redis.call('DEL', ledger .. ':swept:' .. slot) == 1 then
    swept = true
  else
    settled = true
  end
end
for i = 1, n do
  if not settled and redis.call('EXISTS', KEYS[i]) == 1 then
    local delta = tonumber(ARGV[i + 2])
    if swept then delta = delta + tonumber(ARGV[n + 3 + i]) end
    if tonumber(redis.call('INCRBYFLOAT', KEYS[i], delta)) < 0 then
      redis.call('SET', KEYS[i], 0, 'KEEPTTL')
    end
  end
end
for i = n + 1, #KEYS do
  redis.call('ZREM', KEYS[i], slot)
  redis.call('ZREM', KEYS[i] .. ':parked', slot)
end
return 1
