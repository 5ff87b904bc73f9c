-- wrk script: HttpArena's request templates (perf/perf arena run|compare,
-- perf/driver/arena_bench.py, which writes SPEC for each profile).
--
--   wrk -tT -cC -dD -s perf/arena/templates.lua http://127.0.0.1:PORT -- SPEC
--
-- SPEC is a Lua file returning
--   { mode = "conn" | "rotate", every = N, reqs = { R1, R2, ... } }
-- where each R is a raw request (request line, Host, fields, blank line and
-- body, sent byte for byte as gcannon sends its --raw fixtures) or
-- { upload = BYTES }: POST /upload with a Content-Length of BYTES and that
-- many random bytes, no Content-Type and no Expect (HttpArena's upload
-- fixtures), built here so that 20 MiB bodies need not travel in SPEC.
--
-- mode "conn": wrk thread i sends R(i mod #reqs) alone, so with T = #reqs
-- threads every connection keeps one template, as gcannon assigns them
-- (wrk gives each thread C/T connections). mode "rotate": each thread
-- cycles through all of them, as HttpArena's wrk scripts (static,
-- json-tls) do.
--
-- every = N > 0: every Nth request of a thread carries
-- "Connection: close"; the server answers and closes, and wrk reconnects
-- that connection. That is gcannon's -r N (a new connection after N
-- responses) counted over the thread's connections rather than each one:
-- the same share of requests opens a new connection.

local counter = 0

function setup(thread)
   thread:set("tid", counter)
   counter = counter + 1
end

local reqs, closing = {}, {}
local every, n, rotate = 0, 0, false

local function random_body(size)
   local t = {}
   for i = 1, 65536 do
      t[i] = string.char(math.random(0, 255))
   end
   local block = table.concat(t)
   return string.rep(block, math.floor(size / 65536)) ..
      block:sub(1, size % 65536)
end

local function build(r)
   if type(r) == "table" then
      return "POST /upload HTTP/1.1\r\nHost: localhost:8080\r\n" ..
         "Content-Length: " .. r.upload .. "\r\n\r\n" .. random_body(r.upload)
   end
   return r
end

local function with_close(r)
   local eol = r:find("\r\n", 1, true)
   return r:sub(1, eol + 1) .. "Connection: close\r\n" .. r:sub(eol + 2)
end

function init(args)
   local spec = dofile(args[1])
   every = spec.every or 0
   rotate = spec.mode == "rotate"
   local list = spec.reqs
   if not rotate then
      list = { list[((tid or 0) % #list) + 1] }
   end
   for i, r in ipairs(list) do
      reqs[i] = build(r)
      if every > 0 then
         closing[i] = with_close(reqs[i])
      end
   end
end

function request()
   n = n + 1
   local i = rotate and ((n - 1) % #reqs) + 1 or 1
   if every > 0 and n % every == 0 then
      return closing[i]
   end
   return reqs[i]
end
