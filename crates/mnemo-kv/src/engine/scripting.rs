//! EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT, on a real Lua 5.1 (mlua, vendored), as
//! Redis 7.0 runs them.
//!
//! **Atomic, one sync point.** A script runs inside the batch's transaction like an EXEC: its
//! `redis.call`s run through the engine's own dispatch ([`PersistentEngine::run_command`]),
//! one after the other, nothing else in between, and the batch commits them with everything
//! else in one sync point; no reply leaves before it. A script that outgrows what is left of
//! the batch's redo record is rolled back whole, the batch before it committed, and the
//! script run again alone (as an EXEC is). A script that fails half-way keeps the writes it
//! made, as in Redis (a script is atomic, not transactional).
//!
//! **The interpreter** is created on first use and lives until SCRIPT FLUSH. Scripts see what
//! Redis 7.0 gives them: the base library without `dofile`, `loadfile`, `print`, `getfenv`,
//! `setfenv`, `newproxy`, `module`, `require`; `string`, `table`, `math`, `coroutine`,
//! `bit` (LuaBitOp's functions), `cjson` (`engine/cjson.rs`), `cmsgpack`
//! (`engine/cmsgpack.rs`), `struct` (`engine/luastruct.rs`); `redis.*`. Globals and library tables are read-only ("Attempt
//! to modify a readonly table"), and reading an unknown global is an error, with Redis's
//! texts.
//!
//! **Long scripts.** A hook runs every [`HOOK_INSTRUCTIONS`] Lua instructions; once a script
//! has run `busy-reply-threshold` ms (CONFIG; `lua-time-limit` is its old name), it lets the
//! server serve the other connections ([`Host::busy`]): they get BUSY, and SCRIPT KILL
//! stops a script that has not written (a script that wrote is UNKILLABLE, as in Redis).

use std::cell::Cell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Instant;

use mlua::{Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Value, VmState};
use mnemo_resp::bytes::Bytes;
use mnemo_resp::command::{self, CommandSpec, Flags};
use mnemo_resp::{errors, parse_i64, CommandError, CommandId, Protocol, Reply};

use super::{commands, PersistentEngine};
use crate::server::limits::REDIS_VERSION;
use crate::server::{Busy, Effect, Host};

/// Lua instructions between two runs of the hook that watches a script's time (Redis: the
/// same count).
pub const HOOK_INSTRUCTIONS: u32 = 100_000;

/// Deepest table nesting a script's reply may have (a table that contains itself would
/// otherwise recurse for ever).
const REPLY_DEPTH_MAX: usize = 200;

const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";
const KILLED: &str = "ERR Script killed by user with SCRIPT KILL...";
/// The chunk name scripts are compiled under: errors read "user_script:LINE: ...".
const CHUNK: &str = "@user_script";

/// SCRIPT HELP, as Redis 7.0 prints it.
const HELP: &[&str] = &[
    "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DEBUG (YES|SYNC|NO)",
    "    Set the debug mode for subsequent scripts executed.",
    "EXISTS <sha1> [<sha1> ...]",
    "    Return information about the existence of the scripts in the script cache.",
    "FLUSH [ASYNC|SYNC]",
    "    Flush the Lua scripts cache. Very dangerous on replicas.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the scripts cache.",
    "    * SYNC: Synchronously flush the scripts cache.",
    "KILL",
    "    Kill the currently executing Lua script.",
    "LOAD <script>",
    "    Load a script into the scripts cache without executing it.",
    "HELP",
    "    Prints this help.",
];

/// The sandbox, run once per interpreter (chunk "=mnemo"): arguments are the real globals,
/// the run context (`ctx`: `dispatch` while a script runs, `raised`, `resp`), and the Rust
/// helpers. Returns the read-only environment scripts run in.
const PRELUDE: &str = r#"
local real, ctx, sha1hex, log, known, bitlib, trampoline, plain, cjsonlib, msgpacklib,
      structlib = ...
local error, type, select, tostring, setmetatable, setfenv, rawget =
      error, type, select, tostring, setmetatable, setfenv, rawget
local loadstring_raw, load_raw = loadstring, load

for _, name in ipairs({'dofile', 'loadfile', 'print', 'getfenv', 'setfenv', 'newproxy',
                       'module', 'require', 'package'}) do
  real[name] = nil
end

local protected = setmetatable({}, {__mode = 'k'})
local function readonly(t)
  local proxy = setmetatable({}, {
    __index = t,
    __newindex = function() error('Attempt to modify a readonly table', 2) end,
    __metatable = false,
  })
  protected[proxy] = true
  return proxy
end
local setmetatable_raw, rawset_raw, pcall_raw = setmetatable, rawset, pcall
-- What pcall catches from redis.call is the error's text, as in Redis.
real.pcall = function(...) return plain(pcall_raw(...)) end
real.setmetatable = function(t, mt)
  if protected[t] then error('Attempt to modify a readonly table', 0) end
  return setmetatable_raw(t, mt)
end
real.rawset = function(t, k, v)
  if protected[t] then error('Attempt to modify a readonly table', 0) end
  return rawset_raw(t, k, v)
end

-- Functions that raise Redis errors are Lua bodies (returning false and the error text)
-- behind a Rust trampoline: a C function keeps the calling script's frame on the stack even
-- in a tail call, so the error names the script's line as in Redis.
local redis = {}
redis.call = trampoline(function(...)
  local reply, err = ctx.dispatch(...)
  if err then return false, err end
  return true, reply
end)
redis.pcall = function(...)
  local reply, err = ctx.dispatch(...)
  if err then return {err = err} end
  return reply
end
redis.error_reply = function(e)
  if type(e) ~= 'string' then return {err = 'ERR wrong number or type of arguments'} end
  local text = e
  if text:sub(1, 1) == '-' then text = text:sub(2) end
  if not text:find(' ', 1, true) then text = 'ERR ' .. text end
  return {err = (text:gsub('[\r\n]+$', ''))}
end
redis.status_reply = function(s)
  if type(s) ~= 'string' then return {err = 'ERR wrong number or type of arguments'} end
  return {ok = s}
end
redis.sha1hex = trampoline(function(...)
  if select('#', ...) ~= 1 then return false, 'ERR wrong number of arguments' end
  local s = ...
  if type(s) == 'number' then s = tostring(s) end
  if type(s) ~= 'string' then s = '' end
  return true, sha1hex(s)
end)
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
redis.log = trampoline(function(...)
  local n = select('#', ...)
  if n < 2 then return false, 'ERR redis.log() requires two arguments or more.' end
  local level = ...
  if type(level) ~= 'number' then return false, 'ERR First argument must be a number' end
  if level < 0 or level > 3 then return false, 'ERR Invalid debug level.' end
  local parts = {}
  for i = 2, n do
    local v = select(i, ...)
    if type(v) == 'string' or type(v) == 'number' then parts[#parts + 1] = v end
  end
  log(level, table.concat(parts, ' '))
  return true
end)
redis.setresp = trampoline(function(...)
  if select('#', ...) ~= 1 then
    return false, 'ERR redis.setresp() requires one argument.'
  end
  local v = ...
  if v ~= 2 and v ~= 3 then return false, 'ERR RESP version must be 2 or 3.' end
  ctx.resp = v
  return true
end)
redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_ALL =
  0, 1, 2, 2, 3
redis.set_repl = trampoline(function(...)
  if select('#', ...) ~= 1 then return false, 'ERR redis.set_repl() requires one argument.' end
  local v = ...
  if type(v) ~= 'number' or v < 0 or v > 3 then
    return false, 'ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.'
  end
  return true
end)
redis.replicate_commands = function() return true end
redis.breakpoint = function() return false end
redis.debug = function() end
redis.acl_check_cmd = trampoline(function(...)
  if select('#', ...) < 1 then
    return false, 'ERR Please specify at least one argument for this redis lib call'
  end
  if not known(...) then return false, 'ERR Invalid command passed to redis.acl_check_cmd()' end
  return true, true
end)
redis.REDIS_VERSION = ctx.version
redis.REDIS_VERSION_NUM = ctx.version_num

local env
local function sandboxed(f) if f then setfenv(f, env) end return f end
real.loadstring = function(...) return sandboxed(loadstring_raw(...)) end
real.load = function(...) return sandboxed(load_raw(...)) end

real.redis = readonly(redis)
real.bit = readonly(bitlib)
real.cjson = readonly(cjsonlib)
real.cmsgpack = readonly(msgpacklib)
real.struct = readonly(structlib)
for _, name in ipairs({'string', 'table', 'math', 'coroutine'}) do
  real[name] = readonly(real[name])
end
env = setmetatable({}, {
  __index = function(_, name)
    local v = rawget(real, name)
    if v == nil then
      error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
    end
    return v
  end,
  __newindex = function() error('Attempt to modify a readonly table', 2) end,
  __metatable = false,
})
protected[env] = true
real._G = env
return env
"#;

/// One interpreter and what the engine keeps of it.
struct Interp {
    lua: Lua,
    /// The real globals: KEYS and ARGV are set here before each run.
    globals: Table,
    /// The read-only view scripts run in.
    env: Table,
    /// The run context shared with the prelude's `redis.call`.
    ctx: Table,
    /// sha -> compiled function.
    functions: Table,
    /// The hook's view of the running script.
    run: Rc<RunState>,
    /// `xpcall(script, handler)`: how a script is run.
    runner: Function,
    /// The error handler scripts run under ([`error_handler`]).
    handler: Function,
}

/// What the hook knows about the script running now.
#[derive(Debug, Default)]
struct RunState {
    /// When it started; `None` between scripts.
    started: Cell<Option<Instant>>,
    /// busy-reply-threshold, ms.
    threshold_ms: Cell<i64>,
    /// It ran a write command (SCRIPT KILL is refused then).
    wrote: Cell<bool>,
    /// SCRIPT KILL stopped it.
    killed: Cell<bool>,
    /// SHUTDOWN NOSAVE stopped it: its batch must not commit.
    abandon: Cell<bool>,
}

/// The script cache and its interpreter.
#[derive(Default)]
pub(super) struct Scripts {
    interp: Option<Interp>,
    /// sha -> body, every script EVAL ran or SCRIPT LOAD loaded since the last flush.
    bodies: HashMap<String, Bytes>,
}

impl std::fmt::Debug for Scripts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scripts")
            .field("cached", &self.bodies.len())
            .finish_non_exhaustive()
    }
}

impl Scripts {
    /// The interpreter's memory (bytes), the scripts cached, and their bodies' bytes (INFO).
    pub(super) fn memory(&self) -> (usize, usize, usize) {
        let lua = self.interp.as_ref().map_or(0, |i| i.lua.used_memory());
        let bodies = self.bodies.values().map(Bytes::len).sum();
        (lua, self.bodies.len(), bodies)
    }
}

/// The SHA1 of `body`, in lower-case hex: a script's name.
pub fn sha1_hex(body: &[u8]) -> String {
    sha1_smol::Sha1::from(body).digest().to_string()
}

fn lua_err(e: mlua::Error) -> Reply {
    commands::err_owned(format!("ERR {e}"))
}

impl Interp {
    fn new() -> mlua::Result<Interp> {
        let lua = Lua::new_with(
            // Lua 5.1's base library brings `coroutine` with it.
            StdLib::TABLE | StdLib::STRING | StdLib::MATH,
            LuaOptions::default(),
        )?;
        lua.set_memory_limit(super::limits::SCRIPT_MEMORY_MAX)?;
        let globals = lua.globals();
        let ctx = lua.create_table()?;
        ctx.set("version", REDIS_VERSION)?;
        ctx.set("version_num", version_num(REDIS_VERSION))?;
        let sha1hex = lua.create_function(|lua, s: mlua::LuaString| {
            lua.create_string(sha1_hex(&s.as_bytes()))
        })?;
        let log = lua.create_function(|_, (level, text): (i64, mlua::LuaString)| {
            // The server's default verbosity is "notice": debug and verbose lines are dropped.
            if level >= 2 {
                let text = String::from_utf8_lossy(&text.as_bytes()).into_owned();
                std::io::Write::write_all(
                    &mut std::io::stderr(),
                    format!("mnemo script log: {text}\n").as_bytes(),
                )
                .ok();
            }
            Ok(())
        })?;
        let known = lua.create_function(|_, args: MultiValue| {
            let args: Vec<Bytes> = args
                .iter()
                .filter_map(|v| match v {
                    Value::String(s) => Some(Bytes::copy_from_slice(&s.as_bytes())),
                    _ => None,
                })
                .collect();
            Ok(command::resolve(&args).is_ok())
        })?;
        let bitlib = bit_library(&lua)?;
        let trampoline = lua.create_function(|lua, body: Function| {
            let ctx: Table = lua.named_registry_value("mnemo.ctx")?;
            lua.create_function(move |_, args: MultiValue| {
                let mut out = body.call::<MultiValue>(args)?;
                match out.pop_front() {
                    Some(Value::Boolean(false)) => {
                        let text = match out.pop_front() {
                            Some(Value::String(s)) => s.to_string_lossy(),
                            _ => "ERR execution failure".into(),
                        };
                        ctx.raw_set("raised", text.as_str())?;
                        Err(mlua::Error::RuntimeError(text))
                    }
                    _ => Ok(out),
                }
            })
        })?;
        let plain = lua.create_function(|lua, mut values: MultiValue| {
            if let (Some(Value::Boolean(false)), Some(Value::Error(e))) =
                (values.front(), values.get(1))
            {
                let text = match innermost(e) {
                    mlua::Error::RuntimeError(text) => text.clone(),
                    other => other.to_string(),
                };
                values[1] = Value::String(lua.create_string(text)?);
            }
            Ok(values)
        })?;
        lua.set_named_registry_value("mnemo.ctx", ctx.clone())?;
        let prelude = lua.load(PRELUDE).set_name("=mnemo").into_function()?;
        let env: Table = prelude.call((
            globals.clone(),
            ctx.clone(),
            sha1hex,
            log,
            known,
            bitlib,
            trampoline,
            plain,
            super::cjson::library(&lua)?,
            super::cmsgpack::library(&lua)?,
            super::luastruct::library(&lua)?,
        ))?;
        let functions = lua.create_table()?;
        let handler = lua.create_function(error_handler)?;
        let runner = lua
            .load("local f, h = ... return xpcall(f, h)")
            .set_name("=mnemo")
            .into_function()?;
        let run = Rc::new(RunState::default());
        let hook_run = Rc::clone(&run);
        // The global hook: coroutines a script creates inherit it (Lua copies the hook to a
        // new thread), so a loop inside a coroutine is watched too.
        lua.set_global_hook(
            HookTriggers::new().every_nth_instruction(HOOK_INSTRUCTIONS),
            move |lua, _| watch(lua, &hook_run),
        )?;
        Ok(Interp {
            lua,
            globals,
            env,
            ctx,
            functions,
            run,
            runner,
            handler,
        })
    }

    /// Compiles `body` and caches it under `sha`.
    fn compile(&self, sha: &str, body: &[u8]) -> Result<Function, Reply> {
        if let Ok(Value::Function(f)) = self.functions.raw_get::<Value>(sha) {
            return Ok(f);
        }
        let (_, skip) = shebang(body)?;
        let f = self
            .lua
            .load(&body[skip..])
            .set_name(CHUNK)
            .set_environment(self.env.clone())
            .into_function()
            .map_err(|e| {
                let message = match &e {
                    mlua::Error::SyntaxError { message, .. } => message.clone(),
                    other => other.to_string(),
                };
                commands::err_owned(format!(
                    "ERR Error compiling script (new function): {message}"
                ))
            })?;
        self.functions.raw_set(sha, f.clone()).map_err(lua_err)?;
        Ok(f)
    }
}

/// A script's `#!lua flags=...` first line, as Redis 7.0 reads it: whether it declares
/// `no-writes`, and how many bytes the line takes (the newline stays, so line numbers do
/// not move). A body without `#!` has no flags.
fn shebang(body: &[u8]) -> Result<(bool, usize), Reply> {
    if !body.starts_with(b"#!") {
        return Ok((false, 0));
    }
    let Some(end) = body.iter().position(|&b| b == b'\n') else {
        return Err(commands::err("ERR Invalid script shebang"));
    };
    let line = String::from_utf8_lossy(&body[..end]);
    let mut parts = line.split_ascii_whitespace();
    let Some(engine) = parts.next() else {
        return Err(commands::err("ERR Invalid engine in script shebang"));
    };
    if engine != "#!lua" {
        return Err(commands::err_owned(format!(
            "ERR Unexpected engine in script shebang: {engine}"
        )));
    }
    let mut no_writes = false;
    for part in parts {
        let Some(flags) = part.strip_prefix("flags=") else {
            return Err(commands::err_owned(format!(
                "ERR Unknown lua shebang option: {part}"
            )));
        };
        for flag in flags.split(',').filter(|_| !flags.is_empty()) {
            match flag {
                "no-writes" => no_writes = true,
                // Meaningless here (no memory limit, no replicas, no cluster): accepted.
                "allow-oom" | "allow-stale" | "no-cluster" | "allow-cross-slot-keys" => {}
                other => {
                    return Err(commands::err_owned(format!(
                        "ERR Unexpected flag in script shebang: {other}"
                    )))
                }
            }
        }
    }
    Ok((no_writes, end))
}

/// Redis's version as a number: major << 16 | minor << 8 | patch.
fn version_num(version: &str) -> i64 {
    let mut parts = version.split('.').map(|p| p.parse::<i64>().unwrap_or(0));
    let (major, minor, patch) = (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    );
    (major << 16) | (minor << 8) | patch
}

/// The hook: stops a killed script; past the busy threshold, lets the server serve the
/// other connections (which may ask for SCRIPT KILL).
fn watch(lua: &Lua, run: &RunState) -> mlua::Result<VmState> {
    if run.killed.get() {
        return Err(mlua::Error::RuntimeError(KILLED.into()));
    }
    let Some(started) = run.started.get() else {
        return Ok(VmState::Continue);
    };
    let elapsed = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
    if elapsed < run.threshold_ms.get() {
        return Ok(VmState::Continue);
    }
    let ctx: Table = lua.named_registry_value("mnemo.ctx")?;
    if let Ok(Value::Function(busy)) = ctx.raw_get::<Value>("busy") {
        // 0: go on; 1: SCRIPT KILL; 2: SHUTDOWN NOSAVE (the batch is abandoned).
        let answer: i64 = busy.call(!run.wrote.get())?;
        if answer != 0 {
            run.killed.set(true);
            run.abandon.set(answer == 2);
            return Err(mlua::Error::RuntimeError(KILLED.into()));
        }
    }
    Ok(VmState::Continue)
}

/// The error inside mlua's wrappers (a callback's error travels as a `CallbackError`).
fn innermost(error: &mlua::Error) -> &mlua::Error {
    match error {
        mlua::Error::CallbackError { cause, .. } => innermost(cause),
        other => other,
    }
}

/// The error handler scripts run under (xpcall): turns what was raised into Redis's error
/// table `{err=..., source=..., line=...}`, with the script line where it happened (the
/// first Lua frame that is not the sandbox's own code).
fn error_handler(lua: &Lua, err: Value) -> mlua::Result<Table> {
    let ctx: Table = lua.named_registry_value("mnemo.ctx")?;
    let raised: Option<String> = match ctx.raw_get::<Value>("raised")? {
        Value::String(s) => Some(s.to_string_lossy()),
        _ => None,
    };
    let text: Vec<u8> = match &err {
        Value::Table(t) => match t.raw_get::<Value>("err")? {
            Value::String(s) => s.as_bytes().to_vec(),
            other => format!("ERR {}", display(&other)).into_bytes(),
        },
        Value::Error(e) => match innermost(e) {
            // An error reply raised by redis.call (or a redis.* helper), or SCRIPT KILL: its
            // text as is.
            mlua::Error::RuntimeError(text)
                if text == KILLED || raised.as_deref() == Some(text.as_str()) =>
            {
                text.as_bytes().to_vec()
            }
            mlua::Error::RuntimeError(text) => format!("ERR {text}").into_bytes(),
            other => format!("ERR {other}").into_bytes(),
        },
        Value::String(s) => {
            let mut text = b"ERR ".to_vec();
            text.extend_from_slice(&s.as_bytes());
            text
        }
        other => format!("ERR {}", display(other)).into_bytes(),
    };
    let out = lua.create_table()?;
    out.raw_set("err", lua.create_string(&text)?)?;
    for level in 1..200 {
        let found = lua.inspect_stack(level, |debug| {
            let source = debug.source();
            let ours = source.what == "C" || source.source.as_deref() == Some("=mnemo");
            (!ours).then(|| {
                (
                    source.source.as_deref().unwrap_or("?").to_string(),
                    debug.current_line(),
                )
            })
        });
        match found {
            None => break,
            Some(Some((source, line))) => {
                out.raw_set("source", source)?;
                out.raw_set("line", line.unwrap_or(0))?;
                break;
            }
            Some(None) => {}
        }
    }
    Ok(out)
}

/// Where an error raised by a library function points, as `luaL_error` words it: its
/// caller's `chunk:line: ` (nothing when the caller is a C function, such as `pcall`).
pub(super) fn script_position(lua: &Lua) -> String {
    lua.inspect_stack(1, |debug| {
        let source = debug.source();
        match debug.current_line() {
            Some(line) if source.what != "C" && line > 0 => {
                format!("{}:{line}: ", source.short_src.as_deref().unwrap_or("?"))
            }
            _ => String::new(),
        }
    })
    .unwrap_or_default()
}

/// Lua's `tostring` of a value that is not a string (error values).
fn display(value: &Value) -> String {
    match value {
        Value::Nil => "nil".into(),
        Value::Boolean(b) => b.to_string(),
        Value::Integer(i) => i.to_string(),
        Value::Number(n) => format_g14(*n),
        other => other.type_name().to_string(),
    }
}

/// Lua 5.1's number format (`%.14g`).
fn format_g14(n: f64) -> String {
    format_g(n, 14)
}

/// C's `%.{precision}g`.
pub(super) fn format_g(n: f64, precision: usize) -> String {
    if n.is_nan() {
        return if n.is_sign_negative() { "-nan" } else { "nan" }.into();
    }
    if n.is_infinite() {
        return if n < 0.0 { "-inf" } else { "inf" }.into();
    }
    if n == 0.0 {
        return if n.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let p = precision.max(1);
    let sci = format!("{:.*e}", p - 1, n);
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if exponent < -4 || exponent >= i32::try_from(p).unwrap_or(i32::MAX) {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{}e{}{:02}", trim(mantissa), sign, exponent.abs())
    } else {
        let decimals = usize::try_from(i32::try_from(p).unwrap_or(17) - 1 - exponent).unwrap_or(0);
        trim(&format!("{:.*}", decimals, n))
    }
}

/// LuaBitOp's functions (`bit.band`...), on 32-bit two's complement numbers.
fn bit_library(lua: &Lua) -> mlua::Result<Table> {
    fn tobit(v: f64) -> i32 {
        // LuaBitOp: the number modulo 2^32, as a signed 32-bit integer.
        let r = v.round_ties_even();
        (r.rem_euclid(4_294_967_296.0) as u64 as u32) as i32
    }
    let t = lua.create_table()?;
    t.set("tobit", lua.create_function(|_, v: f64| Ok(tobit(v)))?)?;
    t.set("bnot", lua.create_function(|_, v: f64| Ok(!tobit(v)))?)?;
    let fold = |lua: &Lua, op: fn(i32, i32) -> i32| {
        lua.create_function(move |_, args: mlua::Variadic<f64>| {
            let mut it = args.iter();
            let first = it.next().copied().map(tobit).unwrap_or(0);
            Ok(it.fold(first, |acc, &v| op(acc, tobit(v))))
        })
    };
    t.set("band", fold(lua, |a, b| a & b)?)?;
    t.set("bor", fold(lua, |a, b| a | b)?)?;
    t.set("bxor", fold(lua, |a, b| a ^ b)?)?;
    let shift = |lua: &Lua, op: fn(i32, u32) -> i32| {
        lua.create_function(move |_, (v, n): (f64, f64)| Ok(op(tobit(v), (tobit(n) as u32) & 31)))
    };
    t.set("lshift", shift(lua, |a, n| ((a as u32) << n) as i32)?)?;
    t.set("rshift", shift(lua, |a, n| ((a as u32) >> n) as i32)?)?;
    t.set("arshift", shift(lua, |a, n| a >> n)?)?;
    t.set("rol", shift(lua, |a, n| (a as u32).rotate_left(n) as i32)?)?;
    t.set("ror", shift(lua, |a, n| (a as u32).rotate_right(n) as i32)?)?;
    t.set(
        "bswap",
        lua.create_function(|_, v: f64| Ok((tobit(v) as u32).swap_bytes() as i32))?,
    )?;
    t.set(
        "tohex",
        lua.create_function(|_, (v, n): (f64, Option<f64>)| {
            let x = tobit(v) as u32;
            let n = n.map_or(8, tobit);
            let (upper, digits) = if n < 0 {
                (true, n.unsigned_abs())
            } else {
                (false, n as u32)
            };
            let digits = digits.clamp(1, 8) as usize;
            let text = if upper {
                format!("{x:08X}")
            } else {
                format!("{x:08x}")
            };
            Ok(text[8 - digits..].to_string())
        })?,
    )?;
    Ok(t)
}

/// A redis.call argument: strings as they are, numbers as Redis prints them (`%.17g`).
fn argument(value: &Value) -> Option<Bytes> {
    match value {
        Value::String(s) => Some(Bytes::copy_from_slice(&s.as_bytes())),
        Value::Integer(i) => Some(Bytes::from(i.to_string())),
        Value::Number(n) => Some(Bytes::from(format_g(*n, 17))),
        _ => None,
    }
}

/// A command's reply as the script sees it (RESP2 or, after `redis.setresp(3)`, RESP3).
fn reply_to_lua(lua: &Lua, reply: &Reply, resp3: bool) -> mlua::Result<Value> {
    let table_with = |key: &str, value: Value| -> mlua::Result<Value> {
        let t = lua.create_table()?;
        t.raw_set(key, value)?;
        Ok(Value::Table(t))
    };
    let sequence = |items: &[Reply]| -> mlua::Result<Table> {
        let t = lua.create_table_with_capacity(items.len(), 0)?;
        for (i, item) in items.iter().enumerate() {
            t.raw_set(i + 1, reply_to_lua(lua, item, resp3)?)?;
        }
        Ok(t)
    };
    Ok(match reply {
        Reply::EncodedMap { .. } => reply_to_lua(lua, &reply.expanded(), resp3)?,
        Reply::Simple(s) => table_with("ok", Value::String(lua.create_string(s)?))?,
        Reply::Error(s) => table_with("err", Value::String(lua.create_string(s)?))?,
        Reply::Integer(i) => Value::Integer(*i),
        Reply::Bulk(b) => Value::String(lua.create_string(b)?),
        Reply::Verbatim { text, .. } => Value::String(lua.create_string(text)?),
        // RESP3's null is Lua's nil; RESP2's null bulk and array are false.
        Reply::NullBulk | Reply::NullArray | Reply::Null if resp3 => Value::Nil,
        Reply::NullBulk | Reply::NullArray | Reply::Null => Value::Boolean(false),
        Reply::Array(items) | Reply::Push(items) => Value::Table(sequence(items)?),
        Reply::Set(items) if resp3 => {
            let set = lua.create_table()?;
            for item in items {
                set.raw_set(reply_to_lua(lua, item, resp3)?, true)?;
            }
            table_with("set", Value::Table(set))?
        }
        Reply::Set(items) => Value::Table(sequence(items)?),
        Reply::Map(pairs) if resp3 => {
            let map = lua.create_table()?;
            for (k, v) in pairs {
                map.raw_set(reply_to_lua(lua, k, resp3)?, reply_to_lua(lua, v, resp3)?)?;
            }
            table_with("map", Value::Table(map))?
        }
        Reply::Map(pairs) => {
            let flat: Vec<Reply> = pairs
                .iter()
                .flat_map(|(k, v)| [k.clone(), v.clone()])
                .collect();
            Value::Table(sequence(&flat)?)
        }
        Reply::Double(d) if resp3 => table_with("double", Value::Number(*d))?,
        Reply::Double(d) => Value::String(lua.create_string(format_g(*d, 17))?),
        Reply::Boolean(b) if resp3 => Value::Boolean(*b),
        Reply::Boolean(b) => Value::Integer(i64::from(*b)),
    })
}

/// A script's return value as Redis sends it (`resp3`: after `redis.setresp(3)`).
fn lua_to_reply(value: &Value, resp3: bool, depth: usize) -> Reply {
    if depth > REPLY_DEPTH_MAX {
        return commands::err("ERR reached lua stack limit");
    }
    match value {
        Value::String(s) => Reply::Bulk(Bytes::copy_from_slice(&s.as_bytes())),
        Value::Integer(i) => Reply::Integer(*i),
        Value::Number(n) => Reply::Integer(lua_number_to_integer(*n)),
        Value::Boolean(true) if resp3 => Reply::Boolean(true),
        Value::Boolean(true) => Reply::Integer(1),
        Value::Boolean(false) if resp3 => Reply::Boolean(false),
        Value::Table(t) => table_to_reply(t, resp3, depth),
        // An error redis.call raised, caught by the script's pcall: Redis hands it over as
        // its text.
        Value::Error(e) => match innermost(e) {
            mlua::Error::RuntimeError(text) => Reply::Bulk(Bytes::from(text.clone())),
            other => Reply::Bulk(Bytes::from(other.to_string())),
        },
        _ => Reply::NullBulk,
    }
}

/// Redis's `(long long)` of a Lua number: truncation; what x86 gives for NaN, infinities and
/// numbers out of range (the smallest integer).
fn lua_number_to_integer(n: f64) -> i64 {
    if n.is_finite() && n > -9_223_372_036_854_775_808.0 && n < 9_223_372_036_854_775_808.0 {
        n.trunc() as i64
    } else {
        i64::MIN
    }
}

fn table_to_reply(t: &Table, resp3: bool, depth: usize) -> Reply {
    if let Ok(Value::String(s)) = t.raw_get::<Value>("err") {
        let text: Vec<u8> = s
            .as_bytes()
            .iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b })
            .collect();
        return Reply::Error(Bytes::from(text));
    }
    if let Ok(Value::String(s)) = t.raw_get::<Value>("ok") {
        return Reply::Simple(Bytes::copy_from_slice(&s.as_bytes()));
    }
    if resp3 {
        if let Ok(Value::Number(d)) = t.raw_get::<Value>("double") {
            return Reply::Double(d);
        }
        if let Ok(Value::Integer(d)) = t.raw_get::<Value>("double") {
            return Reply::Double(d as f64);
        }
        if let Ok(Value::Table(map)) = t.raw_get::<Value>("map") {
            let pairs = map
                .pairs::<Value, Value>()
                .filter_map(Result::ok)
                .map(|(k, v)| {
                    (
                        lua_to_reply(&k, resp3, depth + 1),
                        lua_to_reply(&v, resp3, depth + 1),
                    )
                })
                .collect();
            return Reply::Map(pairs);
        }
        if let Ok(Value::Table(set)) = t.raw_get::<Value>("set") {
            let members = set
                .pairs::<Value, Value>()
                .filter_map(Result::ok)
                .map(|(k, _)| lua_to_reply(&k, resp3, depth + 1))
                .collect();
            return Reply::Set(members);
        }
    }
    let mut items = Vec::new();
    for i in 1.. {
        match t.raw_get::<Value>(i) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(value) => items.push(lua_to_reply(&value, resp3, depth + 1)),
        }
    }
    Reply::Array(items)
}

/// Which script an EVAL-family request names, and how.
struct Call<'a> {
    sha: String,
    /// EVAL's body; `None` for EVALSHA.
    body: Option<&'a Bytes>,
    keys: &'a [Bytes],
    argv: &'a [Bytes],
    read_only: bool,
}

/// EVAL script numkeys key... arg...: the checks Redis makes before running anything.
fn parse_call<'a>(spec: &'static CommandSpec, args: &'a [Bytes]) -> Result<Call<'a>, Reply> {
    let numkeys = parse_i64(&args[2]).ok_or_else(|| commands::err(errors::NOT_INTEGER))?;
    let rest = args.len() - 3;
    if numkeys > i64::try_from(rest).unwrap_or(i64::MAX) {
        return Err(commands::err(
            "ERR Number of keys can't be greater than number of args",
        ));
    }
    let numkeys = usize::try_from(numkeys)
        .map_err(|_| commands::err("ERR Number of keys can't be negative"))?;
    let (sha, body) = match spec.id {
        CommandId::Eval | CommandId::EvalRo => (sha1_hex(&args[1]), Some(&args[1])),
        _ => (String::from_utf8_lossy(&args[1]).to_ascii_lowercase(), None),
    };
    Ok(Call {
        sha,
        body,
        keys: &args[3..3 + numkeys],
        argv: &args[3 + numkeys..],
        read_only: matches!(spec.id, CommandId::EvalRo | CommandId::EvalshaRo),
    })
}

/// How a script's commands run: refused if they write (EVAL_RO), and in which protocol
/// (`redis.setresp`).
#[derive(Clone, Copy, Debug)]
struct Mode {
    read_only: bool,
    resp3: bool,
}

/// An error from the dispatch of one redis.call: (nil, text).
fn call_error(text: impl Into<Vec<u8>>) -> (Option<Reply>, Option<Vec<u8>>) {
    (None, Some(text.into()))
}

impl PersistentEngine<'_> {
    /// SCRIPT LOAD / EXISTS / FLUSH / KILL / HELP.
    pub(super) fn script_command(&mut self, spec: &'static CommandSpec, args: &[Bytes]) -> Reply {
        match spec.id {
            CommandId::ScriptLoad => {
                let sha = sha1_hex(&args[2]);
                match self
                    .interp()
                    .and_then(|i| i.compile(&sha, &args[2]).map(|_| ()))
                {
                    Ok(()) => {
                        self.scripts.bodies.insert(sha.clone(), args[2].clone());
                        Reply::Bulk(Bytes::from(sha))
                    }
                    Err(e) => e,
                }
            }
            CommandId::ScriptExists => Reply::Array(
                args[2..]
                    .iter()
                    .map(|sha| {
                        let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
                        Reply::Integer(i64::from(self.scripts.bodies.contains_key(&sha)))
                    })
                    .collect(),
            ),
            CommandId::ScriptFlush => {
                let mode_ok = match args {
                    [_, _] => true,
                    [_, _, mode] => {
                        mode.eq_ignore_ascii_case(b"sync") || mode.eq_ignore_ascii_case(b"async")
                    }
                    _ => false,
                };
                if !mode_ok {
                    return commands::err("ERR SCRIPT FLUSH only support SYNC|ASYNC option");
                }
                // A new interpreter, as Redis: nothing a script left behind survives.
                self.scripts = Scripts::default();
                Reply::ok()
            }
            // Reached only when no script runs: a running script's SCRIPT KILL is answered by
            // the server while it waits (`Host::busy`).
            CommandId::ScriptKill => commands::err("NOTBUSY No scripts in execution right now."),
            _ => Reply::Array(
                HELP.iter()
                    .map(|line| Reply::Simple(Bytes::from_static(line.as_bytes())))
                    .collect(),
            ),
        }
    }

    /// The interpreter, created on first use.
    fn interp(&mut self) -> Result<&Interp, Reply> {
        if self.scripts.interp.is_none() {
            self.scripts.interp = Some(Interp::new().map_err(lua_err)?);
        }
        self.scripts
            .interp
            .as_ref()
            .ok_or_else(|| commands::err("ERR no interpreter"))
    }

    /// EVAL / EVALSHA / EVAL_RO / EVALSHA_RO for connection `session` in database `db`.
    pub(super) fn eval(
        &mut self,
        spec: &'static CommandSpec,
        args: &[Bytes],
        session: u64,
        db: usize,
        host: &mut dyn Host,
    ) -> (Reply, Effect) {
        let call = match parse_call(spec, args) {
            Ok(call) => call,
            Err(reply) => return (reply, Effect::default()),
        };
        let function = match call.body {
            Some(body) => {
                let compiled = self.interp().and_then(|i| i.compile(&call.sha, body));
                if compiled.is_ok() {
                    self.scripts
                        .bodies
                        .insert(call.sha.clone(), Bytes::clone(body));
                }
                compiled
            }
            None if self.scripts.bodies.contains_key(&call.sha) => {
                match self.scripts.bodies.get(&call.sha).cloned() {
                    Some(body) => self.interp().and_then(|i| i.compile(&call.sha, &body)),
                    None => Err(commands::err(NOSCRIPT)),
                }
            }
            None => Err(commands::err(NOSCRIPT)),
        };
        let function = match function {
            Ok(f) => f,
            Err(reply) => return (reply, Effect::default()),
        };
        let body = call
            .body
            .cloned()
            .or_else(|| self.scripts.bodies.get(&call.sha).cloned())
            .unwrap_or_default();
        let no_writes = match shebang(&body) {
            Ok((no_writes, _)) => no_writes,
            Err(reply) => return (reply, Effect::default()),
        };
        // A script with a shebang says whether it writes: *_RO runs only those that do not.
        if call.read_only && body.starts_with(b"#!") && !no_writes {
            return (
                commands::err("ERR Can not execute a script with write flag using *_ro command."),
                Effect::default(),
            );
        }
        let call = Call {
            read_only: call.read_only || no_writes,
            ..call
        };
        let Some(txn) = self.txn.as_ref() else {
            return (commands::err("ERR no open batch"), Effect::default());
        };
        let savepoint = match txn.savepoint() {
            Ok(savepoint) => savepoint,
            Err(e) => return (commands::err_owned(format!("ERR {e}")), Effect::default()),
        };
        let rng = self.rng;
        let was_in_exec = std::mem::replace(&mut self.in_exec, true);
        self.exec_overflow = false;
        let mut done = self.run_script(&function, &call, session, db, host);
        if self.exec_overflow {
            // Too large for what was left of the batch's record: undo the script, commit the
            // batch so far, and run it again alone, so that it stays one sync point.
            self.exec_overflow = false;
            self.rng = rng;
            self.zcache.rolled_back();
            if let Some(txn) = self.txn.as_ref() {
                if let Err(e) = txn.rollback_to(&savepoint) {
                    self.poisoned.get_or_insert_with(|| e.to_string());
                }
                if let Err(e) = txn.release(savepoint) {
                    self.poisoned.get_or_insert_with(|| e.to_string());
                }
            }
            let batch_wrote = self.txn.as_ref().is_some_and(|t| !t.is_empty());
            done = (
                commands::err("ERR script too large for one pool transaction; nothing done"),
                Effect::default(),
            );
            if batch_wrote && self.poisoned.is_none() {
                self.commit_early();
                let retry = self.run_script(&function, &call, session, db, host);
                if self.exec_overflow {
                    self.exec_overflow = false;
                    // Alone and still too large: roll the whole transaction back.
                    self.abort_open();
                    self.begin_txn();
                } else {
                    done = retry;
                }
            }
        } else if let Some(txn) = self.txn.as_ref() {
            if let Err(e) = txn.release(savepoint) {
                self.poisoned.get_or_insert_with(|| e.to_string());
            }
        }
        self.in_exec = was_in_exec;
        done
    }

    /// Runs a compiled script once: KEYS and ARGV set, `redis.call` bound to this engine.
    fn run_script(
        &mut self,
        function: &Function,
        call: &Call<'_>,
        session: u64,
        db: usize,
        host: &mut dyn Host,
    ) -> (Reply, Effect) {
        let Some(interp) = self.scripts.interp.take() else {
            return (commands::err("ERR no interpreter"), Effect::default());
        };
        let threshold = self.config.integer("busy-reply-threshold").unwrap_or(5000);
        interp.run.threshold_ms.set(threshold);
        interp.run.wrote.set(false);
        interp.run.killed.set(false);
        interp.run.abandon.set(false);
        interp.run.started.set(Some(Instant::now()));
        let mut effect = Effect::default();
        let outcome = self.run_in_scope(&interp, function, call, session, db, host, &mut effect);
        interp.run.started.set(None);
        if interp.run.abandon.get() {
            // SHUTDOWN NOSAVE: the batch fails its commit, so none of it is kept or answered.
            self.poisoned
                .get_or_insert_with(|| "SHUTDOWN NOSAVE while a script ran".into());
        }
        let _ = interp.ctx.raw_set("dispatch", Value::Nil);
        let _ = interp.ctx.raw_set("busy", Value::Nil);
        let _ = interp.ctx.raw_set("raised", Value::Nil);
        let resp3 = matches!(interp.ctx.raw_get::<Value>("resp"), Ok(Value::Integer(3)))
            || matches!(interp.ctx.raw_get::<Value>("resp"), Ok(Value::Number(n)) if n == 3.0);
        let _ = interp.ctx.raw_set("resp", Value::Nil);
        let reply = match outcome {
            Ok((true, value)) => lua_to_reply(&value, resp3, 0),
            Ok((false, Value::Table(t))) => {
                let text = match t.raw_get::<Value>("err") {
                    Ok(Value::String(s)) => s.as_bytes().to_vec(),
                    _ => b"ERR execution failure".to_vec(),
                };
                let mut text: Vec<u8> = text
                    .into_iter()
                    .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b })
                    .collect();
                if let (Ok(Value::String(source)), Ok(line)) =
                    (t.raw_get::<Value>("source"), t.raw_get::<i64>("line"))
                {
                    text.extend_from_slice(format!(" script: {}, on ", call.sha).as_bytes());
                    text.extend_from_slice(&source.as_bytes());
                    text.extend_from_slice(format!(":{line}.").as_bytes());
                }
                Reply::Error(Bytes::from(text))
            }
            // Not a table: the handler did not run (Lua calls no handler for a memory
            // error). Redis's words, its message cut at 100 bytes, the newline a space.
            Ok((false, other)) => {
                let message = match &other {
                    Value::String(s) => s.to_string_lossy(),
                    _ => "execution failure".to_string(),
                };
                let message: String = message.chars().take(100).collect();
                commands::err_owned(format!("ERR Error running script {}, {message} ", call.sha))
            }
            Err(e) => commands::err_owned(format!("ERR Error running script {}, {e}", call.sha)),
        };
        self.scripts.interp = Some(interp);
        (reply, effect)
    }

    #[allow(clippy::too_many_arguments)]
    fn run_in_scope(
        &mut self,
        interp: &Interp,
        function: &Function,
        call: &Call<'_>,
        session: u64,
        db: usize,
        host: &mut dyn Host,
        effect: &mut Effect,
    ) -> mlua::Result<(bool, Value)> {
        let lua = &interp.lua;
        let keys = lua.create_sequence_from(
            call.keys
                .iter()
                .map(|k| lua.create_string(k))
                .collect::<mlua::Result<Vec<_>>>()?,
        )?;
        let argv = lua.create_sequence_from(
            call.argv
                .iter()
                .map(|a| lua.create_string(a))
                .collect::<mlua::Result<Vec<_>>>()?,
        )?;
        interp.globals.raw_set("KEYS", keys)?;
        interp.globals.raw_set("ARGV", argv)?;
        let run = Rc::clone(&interp.run);
        let read_only = call.read_only;
        let ctx = interp.ctx.clone();
        let mut db = db;
        // The host is used by two callbacks (publish from redis.call, busy from the hook),
        // never at once: a cell hands it to whichever runs.
        let host = std::cell::RefCell::new(host);
        lua.scope(|scope| {
            let dispatch = scope.create_function_mut(|lua, args: MultiValue| {
                let resp3 = matches!(ctx.raw_get::<Value>("resp"), Ok(Value::Integer(3)))
                    || matches!(ctx.raw_get::<Value>("resp"), Ok(Value::Number(n)) if n == 3.0);
                let (reply, error) = self.script_call(
                    &args,
                    session,
                    &mut db,
                    Mode { read_only, resp3 },
                    effect,
                    &run,
                    &mut **host.borrow_mut(),
                );
                let value = match reply {
                    Some(reply) => reply_to_lua(lua, &reply, resp3)?,
                    None => Value::Nil,
                };
                let error = match error {
                    Some(text) => Value::String(lua.create_string(text)?),
                    None => Value::Nil,
                };
                Ok((value, error))
            })?;
            let busy = scope.create_function_mut(|_, killable: bool| {
                Ok(match host.borrow_mut().busy(killable) {
                    Busy::Continue => 0,
                    Busy::Kill if killable => 1,
                    Busy::Kill => 0,
                    Busy::Abandon => 2,
                })
            })?;
            interp.ctx.raw_set("dispatch", dispatch)?;
            interp.ctx.raw_set("busy", busy)?;
            let (ok, value): (bool, Value) = interp
                .runner
                .call((function.clone(), interp.handler.clone()))?;
            Ok((ok, value))
        })
    }

    /// One redis.call / redis.pcall: `(reply, None)`, or `(None, error text)`.
    #[allow(clippy::too_many_arguments)]
    fn script_call(
        &mut self,
        args: &MultiValue,
        session: u64,
        db: &mut usize,
        mode: Mode,
        effect: &mut Effect,
        run: &RunState,
        host: &mut dyn Host,
    ) -> (Option<Reply>, Option<Vec<u8>>) {
        if args.is_empty() {
            return call_error("ERR Please specify at least one argument for this redis lib call");
        }
        let mut words = Vec::with_capacity(args.len());
        for value in args.iter() {
            match argument(value) {
                Some(word) => words.push(word),
                None => {
                    return call_error(
                        "ERR Lua redis lib command arguments must be strings or integers",
                    )
                }
            }
        }
        let spec = match command::resolve(&words) {
            Ok(spec) => spec,
            Err(CommandError::WrongArity { .. }) => {
                return call_error("ERR Wrong number of args calling Redis command from script")
            }
            Err(_) => return call_error("ERR Unknown Redis command called from script"),
        };
        if spec.flags.contains(Flags::NOSCRIPT) {
            return call_error("ERR This Redis command is not allowed from script");
        }
        if mode.read_only && spec.flags.contains(Flags::WRITE) {
            return call_error("ERR Write commands are not allowed from read-only scripts.");
        }
        let reply = match spec.id {
            CommandId::Publish | CommandId::Spublish => {
                let n = host.publish(&words[1], &words[2], spec.id == CommandId::Spublish);
                Reply::Integer(i64::try_from(n).unwrap_or(i64::MAX))
            }
            _ => {
                let protocol = if mode.resp3 {
                    Protocol::Resp3
                } else {
                    Protocol::Resp2
                };
                let (reply, one) = self.run_command(spec, &words, session, db, protocol);
                effect.wrote |= one.wrote;
                if one.wrote {
                    run.wrote.set(true);
                }
                reply
            }
        };
        match reply {
            Reply::Error(text) => {
                let text: Vec<u8> = text
                    .iter()
                    .copied()
                    .filter(|&b| b != b'\r' && b != b'\n')
                    .collect();
                call_error(text)
            }
            reply => (Some(reply), None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_as_c_does() {
        assert_eq!(format_g(3.7, 17), "3.7000000000000002");
        assert_eq!(format_g(3.0, 17), "3");
        assert_eq!(format_g(0.1, 14), "0.1");
        assert_eq!(format_g(1e20, 17), "1e+20");
        assert_eq!(format_g(1.5e-7, 17), "1.4999999999999999e-07");
        assert_eq!(format_g(-2.5, 14), "-2.5");
        assert_eq!(format_g(123456789012345.0, 14), "1.2345678901234e+14");
    }

    #[test]
    fn lua_numbers_truncate_as_redis() {
        assert_eq!(lua_number_to_integer(1.9), 1);
        assert_eq!(lua_number_to_integer(-3.9), -3);
        assert_eq!(lua_number_to_integer(f64::NAN), i64::MIN);
        assert_eq!(lua_number_to_integer(f64::INFINITY), i64::MIN);
    }

    #[test]
    fn script_names_are_sha1() {
        assert_eq!(
            sha1_hex(b"return 1"),
            "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
        );
        assert_eq!(version_num("7.0.15"), 458_767);
    }
}
