-- ARGV: the ledger of pending reservations, then the names of workers that have ended.
-- Takes back every pending reservation those workers made (they will never settle them),
-- without waiting for their deadlines. Answers how many it took back.
local ledger = ARGV[1]
local ended = {}
for i = 2, #ARGV do ended[ARGV[i]] = true end
local taken = 0
for _, slot in ipairs(redis.call('ZRANGE', ledger, 0, -1)) do
  local worker = redis.call('HGET', ledger .. ':' .. slot, WORKER_FIELD)
  if worker and ended[worker] then
    take_back(ledger, slot)
    taken = taken + 1
  end
end
return taken
