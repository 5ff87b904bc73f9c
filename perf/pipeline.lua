-- wrk script: HTTP/1.1 pipelining for perf/perf's h1-pipelined row.
--
-- Every request() call hands wrk one buffer holding DEPTH back-to-back
-- "GET <path> HTTP/1.1" requests; wrk writes it in one go, counts DEPTH
-- responses and only then sends the next batch on that connection.
--
--   wrk -t1 -c16 -d10s -s perf/pipeline.lua http://127.0.0.1:PORT/ [-- DEPTH]
--
-- DEPTH defaults to 16.

local depth = 16
local batch

init = function(args)
   if args[1] ~= nil then
      depth = tonumber(args[1]) or depth
   end
   local reqs = {}
   for i = 1, depth do
      reqs[i] = wrk.format("GET", wrk.path)
   end
   batch = table.concat(reqs)
end

request = function()
   return batch
end
