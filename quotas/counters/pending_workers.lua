-- ARGV: the ledger of pending reservations. Answers the workers that hold a reservation
-- there, each once.
local ledger = ARGV[1]
local seen, workers = {}, {}
for _, slot in ipairs(redis.call('ZRANGE', ledger, 0, -1)) do
  local worker = redis.call('HGET', ledger .. ':' .. slot, WORKER_FIELD)
  if worker and not seen[worker] then
    seen[worker] = true
    workers[#workers + 1] = worker
  end
end
return workers
