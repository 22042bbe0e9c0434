//! EVAL / EVALSHA / EVAL_RO / EVALSHA_RO / SCRIPT against a real redis-server 7.0
//! (`common/mod.rs`): the same scripts give the same replies on both, errors included (their
//! texts, the `script: <sha>, on @user_script:<line>.` suffix), with Redis's conversions both
//! ways and its sandbox. A script that runs too long gets the same BUSY / SCRIPT KILL
//! behaviour on both.

mod common;

use std::time::{Duration, Instant};

use common::{Clients, Conn, Pair};
use mnemo_resp::bytes::Bytes;
use mnemo_resp::Reply;

/// Sends the same arguments (spaces kept inside an argument) to both servers.
fn check(c: &mut Clients, args: &[&str]) {
    let args: Vec<Bytes> = args
        .iter()
        .map(|a| Bytes::copy_from_slice(a.as_bytes()))
        .collect();
    let expected = c.redis.call(&args);
    let got = c.mnemo.call(&args);
    if got != expected {
        c.differences
            .push(format!("{args:?}: redis {expected:?}, mnemo {got:?}"));
    }
}

/// `EVAL script 0`, on both.
fn eval(c: &mut Clients, script: &str) {
    check(c, &["EVAL", script, "0"]);
}

#[test]
fn eval_replies_and_conversions_like_redis() {
    let Some(pair) = Pair::start("scripting differential test") else {
        return;
    };
    let mut c = pair.connect();
    // Lua -> Redis.
    for script in [
        "return 1",
        "return 1.9",
        "return -3.9",
        "return 9007199254740993",
        "return 0/0",
        "return 1/0",
        "return 'x'",
        "return true",
        "return false",
        "return nil",
        "return",
        "return {1,2,3.5,'a',nil,4}",
        "return {1,{2,{3}}}",
        "return {1,2,foo='bar'}",
        "return {ok='fine'}",
        "return {err='bad thing'}",
        "return {err='line\\nbreak'}",
        "return {err=3}",
        "return {ok=3}",
        "return {true,false,1}",
        "return {1, 2.5, {ok='o'}, {err='e'}}",
        "return redis.status_reply('FINE')",
        "return redis.error_reply('MY err')",
        "return redis.error_reply('noprefix')",
        "return redis.error_reply('-WITH dash')",
        "return redis.error_reply()",
        "return redis.status_reply()",
        "return redis.sha1hex('abc')",
        "return redis.sha1hex('')",
        "return redis.sha1hex(12)",
        "return redis.sha1hex()",
        "return redis.LOG_DEBUG + redis.LOG_VERBOSE + redis.LOG_NOTICE + redis.LOG_WARNING",
        "return redis.log(redis.LOG_WARNING, 'from a test')",
        "return redis.log(99, 'hi')",
        "return redis.log(1)",
        "return redis.setresp(3)",
        "redis.setresp(4)",
        "return redis.breakpoint()",
        "return redis.replicate_commands()",
        "return _VERSION",
        "return type(coroutine.create(function() end))",
        "return string.format('%d-%s', 5, 'x')",
        "return table.concat({'a','b'}, ',')",
        "return math.floor(2.7)",
        "return tostring(12.5)",
        "return tonumber('0x10')",
        "return select('#', 1, 2, 3)",
        "return bit.band(7, 3)",
        "return bit.bor(1, 2, 4)",
        "return bit.bxor(5, 1)",
        "return bit.bnot(0)",
        "return bit.lshift(1, 31)",
        "return bit.rshift(-1, 28)",
        "return bit.arshift(-16, 2)",
        "return bit.tohex(255)",
        "return bit.tohex(-1, -4)",
        "return bit.tobit(4294967297)",
        "return loadstring('return 7')()",
        "return pcall(error, 'x')",
        "local ok, e = pcall(error, 'x'); return e",
        "local t = {1,2,3}; setmetatable(t, {__index=function() return 5 end}); return t[9]",
    ] {
        eval(&mut c, script);
    }
    c.assert_same();
}

#[test]
fn redis_call_and_pcall_like_redis() {
    let Some(pair) = Pair::start("scripting differential test") else {
        return;
    };
    let mut c = pair.connect();
    for script in [
        "return redis.call('set','a','b')",
        "return redis.call('get','a')",
        "return redis.call('GET', 'zz')",
        "return redis.call('get','nokey')",
        "return {redis.call('get','nokey')}",
        "return type(redis.call('get','nokey'))",
        "return redis.call('ping')",
        "local r = redis.call('ping'); return type(r)",
        "local r = redis.call('ping'); return r.ok",
        "return redis.call('rpush','l','a','b')",
        "return redis.call('lrange','l',0,-1)",
        "return redis.call('hgetall','nohash')",
        "return redis.call('exists','l','l')",
        "return redis.call('set','f','1.5')",
        "return redis.call('incrbyfloat','f','1')",
        "return redis.call('zadd','z','1.5','m')",
        "return redis.call('zscore','z','m')",
        "return redis.call('set', 'n', 3.7)",
        "return redis.call('get', 'n')",
        "return redis.call('set', 'n', 10)",
        "return redis.call('incrby', 'n', 5)",
        "return redis.call('get', 1)",
        "redis.setresp(3); return redis.call('zscore','z','m')",
        "redis.setresp(3); return redis.call('hgetall','h')",
        "redis.call('hset','h','f','v'); redis.setresp(3); local r = redis.call('hgetall','h'); return r.map.f",
        "return redis.call('hgetall','h')",
        "return redis.call('select', 1)",
        "redis.call('select', 1); return redis.call('set','in1','v')",
        "return redis.call('publish','c','m')",
        // Errors: raised by redis.call (with the script's line), returned by redis.pcall.
        "return redis.call('nosuch')",
        "return redis.pcall('nosuch')",
        "return redis.call('get')",
        "return redis.pcall('get')",
        "return redis.call('set','a','b','c')",
        "return redis.pcall('set','a','b','c')",
        "return redis.call('lpush','a','x')",
        "return redis.pcall('lpush','a','x')",
        "local t = redis.pcall('lpush','a','x'); return t.err",
        "return redis.call()",
        "return redis.call(1)",
        "return redis.call('get', {})",
        "return redis.call('set', 'k', true)",
        "return redis.call('set', 'k', nil)",
        "return pcall(redis.call, 'nosuch')",
        "local ok, e = pcall(redis.call, 'nosuch'); return e",
        "local ok, e = pcall(redis.call, 'nosuch'); return e.err",
        "\n\nreturn redis.call('incr', 'a')",
        // Commands a script may not call.
        "return redis.call('multi')",
        "return redis.call('blpop','l',0)",
        "return redis.call('subscribe','c')",
        "return redis.call('eval','return 1', 0)",
        "return redis.call('client','id')",
        "return redis.call('script','load','return 2')",
        "return redis.call('watch','x')",
        "return redis.call('auth','x')",
        "return redis.call('hello')",
    ] {
        eval(&mut c, script);
    }
    check(&mut c, &["GET", "in1"]);
    check(
        &mut c,
        &[
            "EVAL",
            "return KEYS[1]..ARGV[1]..#KEYS..#ARGV",
            "1",
            "k",
            "a",
        ],
    );
    check(
        &mut c,
        &["EVAL", "return {KEYS, ARGV}", "2", "a", "b", "c", "d", "e"],
    );
    check(
        &mut c,
        &[
            "EVAL",
            "redis.call('set', KEYS[1], ARGV[1]); return redis.call('get', KEYS[1])",
            "1",
            "key",
            "value",
        ],
    );
    c.assert_same();
}

#[test]
fn script_errors_and_sandbox_like_redis() {
    let Some(pair) = Pair::start("scripting differential test") else {
        return;
    };
    let mut c = pair.connect();
    for script in [
        "error('boom')",
        "error({err='X boom'})",
        "error({err='boom'})",
        "error()",
        "error(42)",
        "syntax error here",
        "return 1 +",
        "local x = nil; return x.y",
        "\nlocal f = function()\n  error('deep')\nend\nf()",
        // The sandbox: globals and libraries are read-only.
        "x = 1",
        "return x",
        "return y",
        "string.x = 1",
        "redis.call = 1",
        "local f = function() y = 2 end; f()",
        "KEYS = 1",
        "return _G.KEYS[1]",
        "return type(debug)",
        "return type(os)",
        "return type(print)",
        "return type(dofile)",
        "return type(loadfile)",
        "return type(getfenv)",
        "return type(setfenv)",
        "return type(newproxy)",
        "return type(require)",
        "return type(module)",
        "loadstring('z = 1')()",
        "local t = {} t.x = 1 return t.x",
        "setmetatable(_G, nil)",
        // Shebang lines.
        "#!lua\nreturn 1",
        "#!lua flags=no-writes\nreturn redis.call('set','x','1')",
        "#!lua flags=no-writes\nreturn redis.call('get','x')",
        "#!lua flags=bogus\nreturn 1",
        "#!python\nreturn 1",
        "#!lua name=x\nreturn 1",
        "#!lua\n\nreturn error('x')",
        "#!lua flags=allow-oom,allow-stale,no-cluster,allow-cross-slot-keys\nreturn 2",
        "#!lua flags=no-writes,\nreturn 2",
        "#!lua flags=\nreturn 2",
        "#!lua",
        "#! lua\nreturn 1",
        "#!lua\nreturn redis.call('set','x','1')",
    ] {
        eval(&mut c, script);
    }
    // numkeys.
    check(&mut c, &["EVAL", "return 1", "-1"]);
    check(&mut c, &["EVAL", "return 1", "2", "a"]);
    check(&mut c, &["EVAL", "return 1", "x"]);
    check(&mut c, &["EVAL", "return 1"]);
    check(
        &mut c,
        &["EVALSHA", "ffffffffffffffffffffffffffffffffffffffff", "0"],
    );
    check(&mut c, &["EVALSHA", "e0e1f9", "0"]);
    c.assert_same();
}

#[test]
fn evalsha_script_commands_and_read_only_like_redis() {
    let Some(pair) = Pair::start("scripting differential test") else {
        return;
    };
    let mut c = pair.connect();
    let lines: &[&[&str]] = &[
        &["SCRIPT", "FLUSH"],
        &["EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0"],
        &["SCRIPT", "LOAD", "return 1"],
        &["SCRIPT", "LOAD", "return +"],
        &[
            "SCRIPT",
            "EXISTS",
            "e0e1f9fabfc9d4800c877a703b823ac0578ff8db",
            "ffff",
        ],
        &[
            "SCRIPT",
            "EXISTS",
            "E0E1F9FABFC9D4800C877A703B823AC0578FF8DB",
        ],
        &["EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0"],
        &["EVALSHA", "E0E1F9FABFC9D4800C877A703B823AC0578FF8DB", "0"],
        &[
            "EVALSHA_RO",
            "e0e1f9fabfc9d4800c877a703b823ac0578ff8db",
            "0",
        ],
        &["SCRIPT", "FLUSH", "ASYNC"],
        &["SCRIPT", "FLUSH", "SYNC"],
        &["SCRIPT", "FLUSH", "bogus"],
        &["SCRIPT", "FLUSH", "sync", "x"],
        &[
            "SCRIPT",
            "EXISTS",
            "e0e1f9fabfc9d4800c877a703b823ac0578ff8db",
        ],
        &["EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0"],
        // EVAL caches its script too.
        &["EVAL", "return 1", "0"],
        &[
            "SCRIPT",
            "EXISTS",
            "e0e1f9fabfc9d4800c877a703b823ac0578ff8db",
        ],
        &["EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0"],
        &["SCRIPT", "KILL"],
        &["SCRIPT", "HELP"],
        &["SCRIPT"],
        &["SCRIPT", "NOSUCH"],
        &["SCRIPT", "LOAD"],
        // EVAL_RO refuses writes, allows reads.
        &["SET", "a", "b"],
        &["EVAL_RO", "return redis.call('get','a')", "0"],
        &["EVAL_RO", "return redis.call('set','a','c')", "0"],
        &["EVAL_RO", "return redis.pcall('set','a','c')", "0"],
        &["EVAL_RO", "#!lua\nreturn redis.call('get','a')", "0"],
        &[
            "EVAL_RO",
            "#!lua flags=no-writes\nreturn redis.call('get','a')",
            "0",
        ],
        &[
            "SCRIPT",
            "LOAD",
            "#!lua flags=no-writes\nreturn redis.call('set','a','d')",
        ],
        &["EVALSHA", "d9d8269f89b013823ec1f486b2ce86e4f92f0e2a", "0"],
        &["SCRIPT", "LOAD", "#!nope\nreturn 1"],
        &["GET", "a"],
        // Scripts in a transaction.
        &["MULTI"],
        &["EVAL", "return redis.call('incr', 'counter')", "0"],
        &["EVAL", "return redis.call('incr', 'counter')", "0"],
        &["EXEC"],
        &["CONFIG", "GET", "busy-reply-threshold"],
        &["CONFIG", "GET", "lua-time-limit"],
        &[
            "COMMAND", "GETKEYS", "EVAL", "return 1", "2", "k1", "k2", "arg",
        ],
    ];
    for line in lines {
        check(&mut c, line);
    }
    c.assert_same();
    // INFO memory counts the cached scripts as Redis does.
    check(&mut c, &["SCRIPT", "FLUSH"]);
    check(&mut c, &["SCRIPT", "LOAD", "return 'one'"]);
    check(&mut c, &["EVAL", "return 'two'", "0"]);
    let (redis, mnemo) = c.both("INFO memory");
    for reply in [redis, mnemo] {
        let text = match &reply {
            Reply::Bulk(b) | Reply::Verbatim { text: b, .. } => String::from_utf8_lossy(b),
            other => panic!("INFO: {other:?}"),
        };
        assert!(
            text.lines().any(|l| l == "number_of_cached_scripts:2"),
            "{text}"
        );
        assert!(
            text.lines().any(|l| l.starts_with("used_memory_lua:")),
            "{text}"
        );
    }
}

/// The cjson library: encode and decode as lua-cjson in Redis, errors included.
#[test]
fn cjson_like_redis() {
    let Some(pair) = Pair::start("scripting differential test") else {
        return;
    };
    let mut c = pair.connect();
    for script in [
        "return cjson.encode({1,2,3})",
        "return cjson.encode({})",
        "return cjson.encode({a=1})",
        "return cjson.encode({a=1,b={1,2},c='x'})",
        r#"return cjson.encode('a/b"c\\d\n\t\1\127')"#,
        "return cjson.encode(1.5)",
        "return cjson.encode(0.1)",
        "return cjson.encode(-0.0)",
        "return cjson.encode(1e20)",
        "return cjson.encode(123456789012345678)",
        "return cjson.encode(nil)",
        "return cjson.encode(true)",
        "return cjson.encode(cjson.null)",
        "return cjson.encode({[1]=1,[3]=3})",
        "return cjson.encode({[1]=1,[30]=3})",
        "return cjson.encode({[1.5]=1})",
        "return cjson.encode({[true]=1})",
        "return cjson.encode(function() end)",
        "return cjson.encode(0/0)",
        "return cjson.encode()",
        "return cjson.encode({1,2,x=3})",
        "return cjson.encode({[2]=5})",
        r"return cjson.encode('\200\255')",
        "return cjson.encode({list={1,{a={b='c'}}},n=cjson.null})",
        "local t = cjson.decode('[1,2,{\"a\":null}]'); \
         return {t[1], t[2], type(t[3].a), tostring(t[3].a == cjson.null)}",
        r#"return cjson.decode('"a\\u00e9\\n"')"#,
        "return cjson.decode('{\"a\":1.5}').a",
        "return cjson.decode('{\"a\":{\"b\":[true,false]}}').a.b[1]",
        "return cjson.decode('[1,2')",
        "return cjson.decode('x')",
        "return cjson.decode('')",
        "return cjson.decode('{\"a\" 1}')",
        "return cjson.decode('{1:2}')",
        "return cjson.decode('{\"a\":1 \"b\"}')",
        "return cjson.decode('[1,]')",
        "return cjson.decode('1 2')",
        "return cjson.decode('  true ')",
        "return cjson.decode('nan')",
        "return cjson.decode('1e400')",
        "return cjson.decode('0x10')",
        "return cjson.decode('-0')",
        "return cjson.decode('-12.5e1')",
        "return tostring(cjson.null)",
        "return type(cjson.null)",
        "return cjson.decode()",
        "return cjson.decode(5)",
        r#"return cjson.decode('"\\ud83d\\ude00"')"#,
        r#"return cjson.decode('"bad \\x"')"#,
        "return cjson.encode(cjson.decode('{\"k\":[1,2,{\"x\":\"y\"}]}'))",
        "cjson.x = 1",
        "local ok, e = pcall(cjson.decode, '['); return e",
    ] {
        eval(&mut c, script);
    }
    c.assert_same();
}

/// The cmsgpack library: the same bytes packed, the same values unpacked, the same errors.
#[test]
fn cmsgpack_like_redis() {
    let Some(pair) = Pair::start("scripting differential test") else {
        return;
    };
    let mut c = pair.connect();
    for script in [
        "return cmsgpack.pack(1, -1, 200, -200, 70000, -70000, 5000000000, -5000000000, \
         1.5, 0.1, true, false, nil, 'abc')",
        "return cmsgpack.pack(-32, -33, 127, 128, 255, 256, 65535, 65536, -128, -129, \
         -32768, -32769, 4294967295, 4294967296, -2147483648, -2147483649)",
        "return cmsgpack.pack({1,2,3}, {a=1}, {}, string.rep('x', 40), string.rep('y', 300))",
        "return cmsgpack.pack(string.rep('z', 70000))",
        "local t = {} for i = 1, 20 do t[i] = i end return cmsgpack.pack(t)",
        "local t = {} for i = 1, 20 do t['k' .. i] = i end return #cmsgpack.pack(t)",
        "return cmsgpack.pack(2^63, -2^63, 2^64, 1e300, 0/0, 1/0)",
        "return {cmsgpack.unpack(cmsgpack.pack(1, 'a', {1,2}, {k='v'}))}",
        "local t = cmsgpack.unpack(cmsgpack.pack({k='v'})) return t.k",
        "return cmsgpack.unpack(cmsgpack.pack(-5000000000, 1.5, 0.1))",
        "return {cmsgpack.unpack(cmsgpack.pack(-5000000000, 1.5, 0.1, 2^40))}",
        "return cmsgpack.unpack('\\196\\3abc')",
        "return cmsgpack.unpack('\\205')",
        "return cmsgpack.unpack('\\193')",
        "return cmsgpack.unpack('\\147\\1')",
        "return cmsgpack.unpack('')",
        "return cmsgpack.pack()",
        "return cmsgpack.unpack()",
        "return {cmsgpack.unpack_one(cmsgpack.pack(1,2), 0)}",
        "return {cmsgpack.unpack_one(cmsgpack.pack(1,2), 1)}",
        "return {cmsgpack.unpack_limit(cmsgpack.pack(1,2,3), 2, 0)}",
        "return cmsgpack.pack({[1]=1,[3]=3})",
        "return cmsgpack.pack({[1.5]=1})",
        "local t = {} local c = t for i = 1, 20 do c[1] = {} c = c[1] end \
         return cmsgpack.pack(t)",
        "return cmsgpack.pack(function() end)",
        "cmsgpack.x = 1",
    ] {
        eval(&mut c, script);
    }
    c.assert_same();
}

/// The struct library: the same bytes packed, the same values unpacked, the same errors.
#[test]
fn struct_like_redis() {
    let Some(pair) = Pair::start("scripting differential test") else {
        return;
    };
    let mut c = pair.connect();
    for script in [
        "return struct.pack('>I2', 258)",
        "return struct.pack('<i4', -2)",
        "return struct.pack('bBhHlL', -1, 255, -2, 65535, -3, 7)",
        "return struct.pack('>d', 1.5)",
        "return struct.pack('<f', 1.5)",
        "return struct.pack('>f', -0.1)",
        "return struct.pack('s', 'abc')",
        "return struct.pack('c5', 'abc')",
        "return struct.pack('c0', 'abc')",
        "return struct.pack('c2', 'abc')",
        "return struct.pack('x>i2', 1)",
        "return struct.pack('!4 b i4', 1, 2)",
        "return struct.pack('!i2 b i4', 1, 2, 3)",
        "return struct.pack('!2 b d', 1, 2)",
        "return struct.pack('!3 b i4', 1, 2)",
        "return struct.pack('T', 5)",
        "return struct.pack('i', 5)",
        "return struct.pack('i17', 1)",
        "return struct.pack('>i3', -1)",
        "return struct.pack('>i2', '12')",
        "return struct.pack('i33', 1)",
        "return struct.pack('q', 1)",
        "return struct.pack('i4')",
        "return struct.pack('i4', 'x')",
        "return struct.pack('s', {})",
        "return struct.pack()",
        "return {struct.unpack('>I2', '\\1\\2')}",
        "return {struct.unpack('<i4 b', struct.pack('<i4 b', -2, 3))}",
        "return {struct.unpack('s', 'abc\\0def')}",
        "return {struct.unpack('s', 'abc')}",
        "return {struct.unpack('c3', 'abcdef')}",
        "return {struct.unpack('b c0', '\\3abcdef')}",
        "return {struct.unpack('c0', 'abc')}",
        "return {struct.unpack('>d', struct.pack('>d', 2.25))}",
        "return {struct.unpack('<f', struct.pack('<f', 0.5))}",
        "return {struct.unpack('i4', 'ab')}",
        "return {struct.unpack('>I2', '\\1\\2\\3\\4', 3)}",
        "return {struct.unpack('>I2', '\\1\\2', 0)}",
        "return {struct.unpack('>I2', '\\1\\2', 5)}",
        "return {struct.unpack('>i2', '\\255\\254')}",
        "return {struct.unpack('>I8', '\\255\\255\\255\\255\\255\\255\\255\\255')}",
        "return {struct.unpack('!4 b i4', struct.pack('!4 b i4', 7, 9))}",
        "return {struct.unpack('q', 'abc')}",
        "return struct.size('>i2 d c3')",
        "return struct.size('!4 b i4 b d')",
        "return struct.size('s')",
        "return struct.size('c0')",
        "return struct.size('q')",
        "return struct.size('!3')",
        "struct.x = 1",
    ] {
        eval(&mut c, script);
    }
    c.assert_same();
}

/// A RESP3 connection (HELLO 3): scripts' replies in RESP3, and redis.setresp(3)'s
/// conversions both ways.
#[test]
fn resp3_scripts_like_redis() {
    let Some(pair) = Pair::start("scripting differential test") else {
        return;
    };
    let mut c = pair.connect();
    // One field: the order of a hash's fields is not Redis's.
    check(&mut c, &["HSET", "h", "f", "v"]);
    check(&mut c, &["ZADD", "z", "1.5", "m"]);
    check(&mut c, &["SADD", "s", "only"]);
    let _ = c.both("HELLO 3");
    for script in [
        "return {1, 2, 'x'}",
        "return true",
        "return false",
        "return nil",
        "return 3.9",
        "return {ok='fine'}",
        "return {err='ERR bad'}",
        "return redis.call('hgetall', 'h')",
        "return redis.call('zscore', 'z', 'm')",
        "return redis.call('get', 'nokey')",
        "redis.setresp(3); return redis.call('hgetall', 'h')",
        "redis.setresp(3); return redis.call('zscore', 'z', 'm')",
        "redis.setresp(3); return redis.call('smembers', 's')",
        "redis.setresp(3); return redis.call('get', 'nokey')",
        "redis.setresp(3); return type(redis.call('get', 'nokey'))",
        "redis.setresp(3); return true",
        "redis.setresp(3); return false",
        "redis.setresp(3); return {double=2.5}",
        "redis.setresp(3); return {map={a=1}}",
        "redis.setresp(3); return {set={x=true}}",
        "redis.setresp(3); return redis.call('zscore', 'z', 'm').double",
        "return redis.call('nosuch')",
    ] {
        eval(&mut c, script);
    }
    c.assert_same();
}

/// A script that loops for ever: past busy-reply-threshold the others get BUSY; SCRIPT KILL
/// stops it; a script that wrote is UNKILLABLE. The same on both servers.
/// TIME inside a script is the clock now, to the microsecond, on both: it moves while the
/// script runs (mnemo once answered the batch's millisecond clock, which stands still).
#[test]
fn time_moves_inside_a_script_like_redis() {
    let Some(pair) = Pair::start("scripting differential test") else {
        return;
    };
    let mut c = pair.connect();
    eval(
        &mut c,
        "local function now() local t = redis.call('time') \
            return tonumber(t[1]) * 1000000 + tonumber(t[2]) end \
         local a = now() local b = now() local calls = 0 \
         while b == a and calls < 1000000 do b = now() calls = calls + 1 end \
         return b > a and 1 or 0",
    );
    c.assert_same();
}

#[test]
fn a_long_script_answers_busy_and_dies_by_script_kill() {
    let Some(pair) = Pair::start("scripting differential test") else {
        return;
    };
    for (name, port) in [("redis", pair.redis.port()), ("mnemo", pair.mnemo_port())] {
        let connect = || {
            common::Conn::new(std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect"))
        };
        let mut runner = connect();
        let mut other = connect();
        let call = |conn: &mut common::Conn, args: &[&str]| {
            let args: Vec<Bytes> = args
                .iter()
                .map(|a| Bytes::copy_from_slice(a.as_bytes()))
                .collect();
            conn.call(&args)
        };
        assert_eq!(
            call(
                &mut other,
                &["CONFIG", "SET", "busy-reply-threshold", "100"]
            ),
            Reply::ok(),
            "{name}"
        );
        // Not busy: nothing to kill.
        assert_eq!(
            call(&mut other, &["SCRIPT", "KILL"]),
            Reply::Error(Bytes::from_static(
                b"NOTBUSY No scripts in execution right now."
            )),
            "{name}"
        );
        let args: Vec<Bytes> = ["EVAL", "local i = 0 while true do i = i + 1 end", "0"]
            .iter()
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect();
        let started = Instant::now();
        runner.send(&args);
        std::thread::sleep(Duration::from_millis(300));
        let busy = call(&mut other, &["GET", "a"]);
        assert_eq!(
            busy,
            Reply::Error(Bytes::from_static(
                b"BUSY Redis is busy running a script. You can only call SCRIPT KILL or \
                  SHUTDOWN NOSAVE."
            )),
            "{name}"
        );
        assert_eq!(call(&mut other, &["SCRIPT", "KILL"]), Reply::ok(), "{name}");
        let killed = runner.reply();
        let Reply::Error(text) = &killed else {
            panic!("{name}: the killed script answered {killed:?}");
        };
        assert!(
            text.starts_with(b"ERR Script killed by user with SCRIPT KILL... script: "),
            "{name}: {killed:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(5), "{name}");
        assert_eq!(call(&mut other, &["GET", "a"]), Reply::NullBulk, "{name}");

        // The same for a loop inside a coroutine.
        let args: Vec<Bytes> = [
            "EVAL",
            "local co = coroutine.wrap(function() while true do end end) co()",
            "0",
        ]
        .iter()
        .map(|a| Bytes::copy_from_slice(a.as_bytes()))
        .collect();
        runner.send(&args);
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            matches!(call(&mut other, &["GET", "a"]), Reply::Error(ref t) if t.starts_with(b"BUSY ")),
            "{name}"
        );
        assert_eq!(call(&mut other, &["SCRIPT", "KILL"]), Reply::ok(), "{name}");
        let killed = runner.reply();
        assert!(
            matches!(&killed, Reply::Error(t) if t.starts_with(b"ERR Script killed by user")),
            "{name}: {killed:?}"
        );

        // A script that wrote cannot be killed; it ends by itself, after a loop sized on
        // this server to run about 1.5 s (a fixed count ended before SCRIPT KILL came on a
        // fast, quiet machine).
        let timed = Instant::now();
        assert_eq!(
            call(&mut other, &["EVAL", "for i = 1, 1e7 do end return 1", "0"]),
            Reply::Integer(1),
            "{name}"
        );
        let per_1e7 = timed.elapsed().as_secs_f64().max(1e-3);
        let count = (1e7 * 1.5 / per_1e7).ceil();
        let writer = format!("redis.call('set', 'w', '1') for i = 1, {count} do end return 'done'");
        let args: Vec<Bytes> = ["EVAL", writer.as_str(), "0"]
            .iter()
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect();
        runner.send(&args);
        std::thread::sleep(Duration::from_millis(300));
        let refused = call(&mut other, &["SCRIPT", "KILL"]);
        let Reply::Error(text) = &refused else {
            panic!("{name}: SCRIPT KILL of a writer answered {refused:?}");
        };
        assert!(text.starts_with(b"UNKILLABLE "), "{name}: {refused:?}");
        assert_eq!(
            runner.reply(),
            Reply::Bulk(Bytes::from_static(b"done")),
            "{name}"
        );
        assert_eq!(
            call(&mut other, &["GET", "w"]),
            Reply::Bulk(Bytes::from_static(b"1")),
            "{name}"
        );
        assert_eq!(
            call(
                &mut other,
                &["CONFIG", "SET", "busy-reply-threshold", "5000"]
            ),
            Reply::ok(),
            "{name}"
        );
    }
}

/// A script that wrote and loops for ever cannot be killed; SHUTDOWN NOSAVE stops the
/// server without its batch: after a restart the script's write is not there, what was
/// acknowledged before is.
#[test]
fn shutdown_nosave_stops_a_writing_script_without_its_writes() {
    let Some(mut pair) = Pair::start("scripting differential test") else {
        return;
    };
    let port = pair.mnemo_port();
    let connect = || Conn::new(std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect"));
    let mut runner = connect();
    let mut other = connect();
    let call = |conn: &mut Conn, line: &[&str]| {
        let args: Vec<Bytes> = line
            .iter()
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect();
        conn.call(&args)
    };
    assert_eq!(call(&mut other, &["SET", "before", "1"]), Reply::ok());
    assert_eq!(
        call(
            &mut other,
            &["CONFIG", "SET", "busy-reply-threshold", "100"]
        ),
        Reply::ok()
    );
    let args: Vec<Bytes> = ["EVAL", "redis.call('set', 'w', '1') while true do end", "0"]
        .iter()
        .map(|a| Bytes::copy_from_slice(a.as_bytes()))
        .collect();
    runner.send(&args);
    std::thread::sleep(Duration::from_millis(300));
    let refused = call(&mut other, &["SCRIPT", "KILL"]);
    assert!(
        matches!(&refused, Reply::Error(t) if t.starts_with(b"UNKILLABLE ")),
        "{refused:?}"
    );
    other.send(&[
        Bytes::from_static(b"SHUTDOWN"),
        Bytes::from_static(b"NOSAVE"),
    ]);
    assert!(
        !runner.has_reply_within(Duration::from_secs(3)),
        "the abandoned script's caller got a reply"
    );
    pair.restart_mnemo(16);
    let mut after = pair.mnemo.connect();
    assert_eq!(call(&mut after, &["GET", "w"]), Reply::NullBulk);
    assert_eq!(
        call(&mut after, &["GET", "before"]),
        Reply::Bulk(Bytes::from_static(b"1"))
    );
}

/// Scripts and transactions: EVAL queued in MULTI, a script's write touches a WATCHed key
/// (the watcher's EXEC fails), an error inside a queued script.
#[test]
fn scripts_with_multi_and_watch_like_redis() {
    let Some(pair) = Pair::start("scripting differential test") else {
        return;
    };
    let mut a = pair.connect();
    let mut b = pair.connect();
    check(&mut a, &["SET", "w", "0"]);
    check(&mut a, &["WATCH", "w"]);
    check(
        &mut b,
        &["EVAL", "return redis.call('incr', KEYS[1])", "1", "w"],
    );
    check(&mut a, &["MULTI"]);
    check(&mut a, &["SET", "w", "a"]);
    check(&mut a, &["EXEC"]);
    check(&mut a, &["GET", "w"]);
    // A read-only script does not touch the watched key.
    check(&mut a, &["WATCH", "w"]);
    check(
        &mut b,
        &["EVAL", "return redis.call('get', KEYS[1])", "1", "w"],
    );
    check(&mut a, &["MULTI"]);
    check(&mut a, &["EVAL", "return redis.call('incr', 'w')", "0"]);
    check(
        &mut a,
        &["EVAL", "return redis.call('lpush', 'w', 'x')", "0"],
    );
    check(&mut a, &["EVAL", "error('inside')", "0"]);
    check(
        &mut a,
        &["EVALSHA", "ffffffffffffffffffffffffffffffffffffffff", "0"],
    );
    check(
        &mut a,
        &[
            "SCRIPT",
            "EXISTS",
            "ffffffffffffffffffffffffffffffffffffffff",
        ],
    );
    check(&mut a, &["EXEC"]);
    check(&mut a, &["GET", "w"]);
    a.assert_same();
    b.assert_same();
}

/// A script that asks for more memory than the interpreter may hold gets Lua's error; the
/// server goes on (and so does the interpreter).
#[test]
fn a_script_out_of_memory_gets_an_error() {
    let Some(pair) = Pair::start("scripting differential test") else {
        return;
    };
    let mut conn = pair.mnemo.connect();
    let call = |conn: &mut Conn, line: &[&str]| {
        let args: Vec<Bytes> = line
            .iter()
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect();
        conn.call(&args)
    };
    let reply = call(
        &mut conn,
        &["EVAL", "local s = string.rep('x', 2^28 + 1) return #s", "0"],
    );
    assert!(
        matches!(&reply, Reply::Error(t) if String::from_utf8_lossy(t).contains("not enough memory")),
        "{reply:?}"
    );
    assert_eq!(
        call(&mut conn, &["EVAL", "return #string.rep('x', 1000)", "0"]),
        Reply::Integer(1000)
    );
}
