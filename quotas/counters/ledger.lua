-- The ledger of pending reservations, shared by the scripts that read it: a sorted set of
-- slots by deadline; each slot's amounts in the hash <ledger>:<slot> (counter -> amount),
-- beside WORKER_FIELD, the worker that reserved. A slot taken back has its amounts taken
-- off the counters (never below 0) and is marked swept, so a late settle charges what the
-- call used (settle.lua).
local WORKER_FIELD = '@worker'

local function take_back(ledger, slot)
  local held = redis.call('HGETALL', ledger .. ':' .. slot)
  for j = 1, #held, 2 do
    if held[j] ~= WORKER_FIELD and redis.call('EXISTS', held[j]) == 1 then
      if tonumber(redis.call('INCRBYFLOAT', held[j], -tonumber(held[j + 1]))) < 0 then
        redis.call('SET', held[j], 0, 'KEEPTTL')
      end
    end
  end
  redis.call('DEL', ledger .. ':' .. slot)
  redis.call('ZREM', ledger, slot)
  redis.call('SET', ledger .. ':swept:' .. slot, 1, 'EX', LEDGER_KEEP)
end
