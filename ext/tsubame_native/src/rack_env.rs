//! Building the Rack env for a request. Keys and the common values are
//! frozen, interned Ruby strings made once, so a request allocates only the
//! strings that are really its own.

use crate::ffi::{fill_in_place, hash_dup, hash_with_capacity, interned_str, with_bytes, EnvPairs};
use crate::input::Input;
use magnus::value::{Opaque, ReprValue};
use magnus::{gc, Error, RArray, RHash, RString, Ruby, TryConvert, Value};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use tsubame_engine::dispatch::job::ListenerInfo;
use tsubame_engine::message::head::RequestHead;
use tsubame_engine::message::head::{Framing, Version};
use tsubame_engine::ConnInfo;

/// Frozen, interned, permanently marked strings.
pub struct Keys {
    request_method: Opaque<RString>,
    path_info: Opaque<RString>,
    query_string: Opaque<RString>,
    server_name: Opaque<RString>,
    server_port: Opaque<RString>,
    server_protocol: Opaque<RString>,
    http_version: Opaque<RString>,
    request_uri: Opaque<RString>,
    request_path: Opaque<RString>,
    remote_addr: Opaque<RString>,
    content_type: Opaque<RString>,
    content_length: Opaque<RString>,
    pub rack_input: Opaque<RString>,
    pub rack_hijack: Opaque<RString>,
    pub rack_hijack_io: Opaque<RString>,
    tsubame_request: Opaque<RString>,
    pub rack_response_finished: Opaque<RString>,
    pub rack_upgrade: Opaque<RString>,
    pub rack_protocol: Opaque<RString>,
    rack_after_reply: Opaque<RString>,
    rack_url_scheme: Opaque<RString>,
    rack_hijack_p: Opaque<RString>,
    rack_upgrade_p: Opaque<RString>,
    https_key: Opaque<RString>,
    https: Opaque<RString>,
    http: Opaque<RString>,
    on: Opaque<RString>,
    http11: Opaque<RString>,
    http10: Opaque<RString>,
    http2: Opaque<RString>,
    empty: Opaque<RString>,
    methods: Vec<(&'static [u8], Opaque<RString>)>,
}

impl Keys {
    /// The `IN_PLACE` keys, in the order the templates hold them.
    fn in_place(&self) -> [Opaque<RString>; IN_PLACE] {
        [
            self.request_method,
            self.path_info,
            self.request_path,
            self.request_uri,
            self.query_string,
            self.server_protocol,
            self.http_version,
            self.remote_addr,
            self.server_name,
            self.server_port,
            self.rack_input,
            self.tsubame_request,
            self.rack_response_finished,
            self.rack_after_reply,
        ]
    }
}

static KEYS: OnceLock<Keys> = OnceLock::new();

/// Whether the app runs on Rack 3 or later (`Tsubame::Native.rack3 = `,
/// set by the server before it serves): the meaning of `rack.hijack?`.
static RACK3: AtomicBool = AtomicBool::new(false);

pub fn set_rack3(on: bool) {
    RACK3.store(on, Ordering::Relaxed);
}

/// The table sizes the env templates come in (`env_templates`). Ruby's
/// tables hold a power of two of entries, and a size of exactly a power of
/// two gets the next one up: 64 would make a 128-entry table, 3 KiB that
/// each request's env allocated and left for the GC to free.
const ENV_CAPACITIES: [usize; 4] = [32, 64, 128, 256];

/// Entries every request adds to the base env besides one per header
/// field (`build`: the request line's seven, the address, server name and
/// port, input, hijack, this request, and the two callback lists).
const REQUEST_ENTRIES: usize = 15;

/// Of those, the ones every env gets on either protocol (`Keys::in_place`):
/// the templates hold them with placeholder values, which `build`
/// replaces by position (`ffi::fill_in_place`) instead of inserting them.
const IN_PLACE: usize = 14;

/// Envs whose `IN_PLACE` entries had to be inserted after all
/// (`Native.env_in_place_misses`; a test holds it at 0): only a Ruby whose
/// tables were laid out otherwise would make any.
static IN_PLACE_MISSES: AtomicUsize = AtomicUsize::new(0);

/// `Tsubame::Native.env_in_place_misses`.
pub fn in_place_misses() -> usize {
    IN_PLACE_MISSES.load(Ordering::Relaxed)
}

/// How many entries the last env the app answered held: the app's own
/// additions (a framework's dozens) included, so the next env is made with
/// room for them instead of growing, and copied, while the app runs.
static ENTRIES_SEEN: AtomicUsize = AtomicUsize::new(0);

/// Notes the size of an env the app has answered (`Request#respond`).
pub fn note_answered_env(entries: usize) {
    if ENTRIES_SEEN.load(Ordering::Relaxed) != entries {
        ENTRIES_SEEN.store(entries, Ordering::Relaxed);
    }
}

/// `Tsubame::Native.env_templates(hash)`: `hash`'s entries in frozen
/// Hashes of each size in `ENV_CAPACITIES` (a frozen Array of them); each
/// request's env is a copy of the smallest that has room for it, and a
/// copy keeps its table's size, so filling it allocates nothing more.
pub fn env_templates(ruby: &Ruby, base: RHash) -> Result<RArray, Error> {
    let k = keys(ruby)?;
    let templates = ruby.ary_new_capa(ENV_CAPACITIES.len());
    for capacity in ENV_CAPACITIES {
        // One less: see `ENV_CAPACITIES`.
        let env = hash_with_capacity(ruby, capacity - 1);
        base.foreach(|key: Value, value: Value| {
            env.aset(key, value)?;
            Ok(magnus::r_hash::ForEach::Continue)
        })?;
        // Last, with placeholders: `build` stores their values by position.
        for key in k.in_place() {
            env.aset(ruby.get_inner(key), ruby.qnil())?;
        }
        env.freeze();
        templates.push(env)?;
    }
    templates.freeze();
    Ok(templates)
}

/// The template for `head`'s env: the smallest with room for what the
/// request adds and for what the app's last env ended up holding.
fn template_for(templates: RArray, head: &RequestHead, listener: &ListenerInfo) -> Result<RHash, Error> {
    let base_len = templates.entry::<RHash>(0)?.len();
    let scheme = if listener.url_scheme == "https" || listener.trust_forwarded_proto {
        2 // rack.url_scheme, HTTPS
    } else {
        0
    };
    let upgrade = if head
        .headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case(b"upgrade"))
    {
        2 // rack.protocol, rack.upgrade?
    } else {
        0
    };
    // The template already holds the IN_PLACE entries.
    let wanted = (base_len + REQUEST_ENTRIES - IN_PLACE + head.headers.len() + scheme + upgrade)
        .max(ENTRIES_SEEN.load(Ordering::Relaxed));
    let index = ENV_CAPACITIES
        .iter()
        .position(|&capacity| capacity >= wanted)
        .unwrap_or(ENV_CAPACITIES.len() - 1);
    templates.entry(index as isize)
}

fn permanent(ruby: &Ruby, bytes: &[u8]) -> Opaque<RString> {
    let s = ruby.str_from_slice(bytes).to_interned_str();
    gc::register_mark_object(s);
    Opaque::from(s)
}

pub fn init(ruby: &Ruby) {
    let k = |s: &str| permanent(ruby, s.as_bytes());
    let methods = ["GET", "POST", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"]
        .iter()
        .map(|m| (m.as_bytes(), k(m)))
        .collect();
    let _ = KEYS.set(Keys {
        request_method: k("REQUEST_METHOD"),
        path_info: k("PATH_INFO"),
        query_string: k("QUERY_STRING"),
        server_name: k("SERVER_NAME"),
        server_port: k("SERVER_PORT"),
        server_protocol: k("SERVER_PROTOCOL"),
        http_version: k("HTTP_VERSION"),
        request_uri: k("REQUEST_URI"),
        request_path: k("REQUEST_PATH"),
        remote_addr: k("REMOTE_ADDR"),
        content_type: k("CONTENT_TYPE"),
        content_length: k("CONTENT_LENGTH"),
        rack_input: k("rack.input"),
        rack_hijack: k("rack.hijack"),
        rack_hijack_io: k("rack.hijack_io"),
        tsubame_request: k("tsubame.request"),
        rack_response_finished: k("rack.response_finished"),
        rack_upgrade: k("rack.upgrade"),
        rack_protocol: k("rack.protocol"),
        rack_after_reply: k("rack.after_reply"),
        rack_url_scheme: k("rack.url_scheme"),
        rack_hijack_p: k("rack.hijack?"),
        rack_upgrade_p: k("rack.upgrade?"),
        https_key: k("HTTPS"),
        https: k("https"),
        http: k("http"),
        on: k("on"),
        http11: k("HTTP/1.1"),
        http10: k("HTTP/1.0"),
        http2: k("HTTP/2"),
        empty: k(""),
        methods,
    });
    let recent = ruby.ary_new_capa(RECENT_SLOTS);
    for _ in 0..RECENT_SLOTS {
        let _ = recent.push(ruby.qnil());
    }
    gc::register_mark_object(recent);
    let _ = RECENT.set(recent.into());
    let mut cache = header_cache();
    for &(name, shared) in COMMON_HEADERS {
        cache.insert(
            name.as_bytes().into(),
            (permanent(ruby, &cgi_name(name.as_bytes())), shared),
        );
    }
}

/// `init` runs when the extension loads, so this fails only if Rust code
/// were called before Ruby loaded the extension.
pub fn keys(ruby: &Ruby) -> Result<&'static Keys, Error> {
    KEYS.get()
        .ok_or_else(|| Error::new(ruby.exception_runtime_error(), "tsubame_native is not initialised"))
}

/// Whether a header's env value may be a frozen string shared between the
/// requests that send the same bytes (`interned_str`), as Puma shares
/// `REMOTE_ADDR` between the requests of a connection: yes for values that
/// repeat from request to request (the same client software, the same
/// site), no for values that identify a user or a request (cookies,
/// credentials, ids).
const SHARED: bool = true;
const OWN: bool = false;

/// Headers whose CGI names (`HTTP_USER_AGENT`) are made once at load,
/// each with whether its value is shared (`SHARED`) or the request's own.
const COMMON_HEADERS: &[(&str, bool)] = &[
    ("host", SHARED),
    ("user-agent", SHARED),
    ("accept", SHARED),
    ("accept-encoding", SHARED),
    ("accept-language", SHARED),
    ("connection", SHARED),
    ("cookie", OWN),
    ("referer", OWN),
    ("origin", SHARED),
    ("cache-control", SHARED),
    ("pragma", SHARED),
    ("upgrade-insecure-requests", SHARED),
    ("x-forwarded-for", OWN),
    ("x-forwarded-proto", SHARED),
    ("x-forwarded-host", SHARED),
    ("x-forwarded-port", SHARED),
    ("x-real-ip", OWN),
    ("x-request-id", OWN),
    ("authorization", OWN),
    ("if-none-match", OWN),
    ("if-modified-since", OWN),
    ("sec-fetch-site", SHARED),
    ("sec-fetch-mode", SHARED),
    ("sec-fetch-dest", SHARED),
    ("sec-fetch-user", SHARED),
    ("sec-ch-ua", SHARED),
    ("sec-ch-ua-mobile", SHARED),
    ("sec-ch-ua-platform", SHARED),
    ("dnt", SHARED),
    ("x-requested-with", SHARED),
    ("x-csrf-token", OWN),
    ("keep-alive", SHARED),
    ("te", SHARED),
    ("expect", OWN),
    ("range", OWN),
    ("if-range", OWN),
    ("via", SHARED),
    ("forwarded", OWN),
    ("transfer-encoding", OWN),
];

/// Longer values are unlikely to repeat; they are not worth hashing.
const SHARED_VALUE_MAX: usize = 256;

/// Slots of `RECENT`.
const RECENT_SLOTS: usize = 64;

/// The shared values handed out lately, one per slot, in an Array made at
/// load and marked for good (so a value stays alive while it sits here):
/// the next request's `REMOTE_ADDR`, `Host` or `User-Agent` is almost
/// always one of them, found by comparing bytes with one slot instead of
/// hashing the value whole and probing Ruby's interned-string table (six
/// lookups were 3% of a hello request's CPU).
static RECENT: OnceLock<Opaque<RArray>> = OnceLock::new();

/// The slot of `RECENT` a value goes in: mixed from its length and three of
/// its bytes, so choosing the slot costs no pass over the value; values
/// that share a slot only take turns in it.
fn recent_slot(bytes: &[u8]) -> usize {
    let sampled = match bytes {
        [] => [0; 3],
        _ => [bytes[0], bytes[bytes.len() / 2], bytes[bytes.len() - 1]],
    };
    let mixed = sampled
        .iter()
        .fold(bytes.len() as u32, |h, &b| (h ^ u32::from(b)).wrapping_mul(0x9e37_79b1));
    (mixed >> 26) as usize % RECENT_SLOTS
}

/// A value the env shares between requests (`SHARED` in `COMMON_HEADERS`),
/// or a string of its own when it is too long to be worth sharing.
fn shared_value(ruby: &Ruby, bytes: &[u8]) -> Value {
    if bytes.len() > SHARED_VALUE_MAX {
        return ruby.str_from_slice(bytes).as_value();
    }
    let Some(recent) = RECENT.get().map(|r| ruby.get_inner(*r)) else {
        return interned_str(bytes);
    };
    let slot = recent_slot(bytes) as isize;
    if let Ok(last) = recent.entry::<Value>(slot) {
        // Only frozen strings are ever stored, so the bytes compared are
        // the bytes the string will keep.
        if RString::from_value(last).is_some_and(|s| with_bytes(s, |held| held == bytes)) {
            return last;
        }
    }
    let value = interned_str(bytes);
    // The slot's index is in bounds and the Array is never frozen.
    let _ = recent.store(slot, value);
    value
}

/// Interned names are never freed, so the cache stops growing here: a
/// client sending endless distinct header names cannot grow memory.
const HEADER_CACHE_LIMIT: usize = 512;

#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 { 0xcbf29ce484222325 } else { self.0 };
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x100000001b3);
        }
        self.0 = h;
    }
}

/// Lower-case header name → its env key, and whether its value is shared
/// (`SHARED` in `COMMON_HEADERS`).
type HeaderCache = HashMap<Box<[u8]>, (Opaque<RString>, bool), BuildHasherDefault<Fnv>>;

fn header_cache() -> std::sync::MutexGuard<'static, HeaderCache> {
    static CACHE: OnceLock<Mutex<HeaderCache>> = OnceLock::new();
    // Only ever locked with the GVL held, so it is never contended; a
    // poisoned lock still holds a valid map.
    CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// `X-Forwarded-For` → `HTTP_X_FORWARDED_FOR`.
fn cgi_name(name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len() + 5);
    out.extend_from_slice(b"HTTP_");
    out.extend(
        name.iter()
            .map(|&b| if b == b'-' { b'_' } else { b.to_ascii_uppercase() }),
    );
    out
}

/// The env key for a header name, and whether its value is shared.
fn header_key(ruby: &Ruby, cache: &mut HeaderCache, name: &[u8]) -> (RString, bool) {
    let mut lower = [0u8; 64];
    if name.len() <= lower.len() {
        let lower = &mut lower[..name.len()];
        lower.copy_from_slice(name);
        lower.make_ascii_lowercase();
        if let Some((key, shared)) = cache.get(&*lower) {
            return (ruby.get_inner(*key), *shared);
        }
        if cache.len() < HEADER_CACHE_LIMIT {
            let key = permanent(ruby, &cgi_name(lower));
            cache.insert((&*lower).into(), (key, false));
            return (ruby.get_inner(key), false);
        }
    }
    let key = ruby.str_from_slice(&cgi_name(name));
    key.freeze();
    (key, false)
}

/// Splits `host[:port]` / `[v6]:port`.
fn split_host(host: &[u8]) -> (&[u8], Option<&[u8]>) {
    if host.first() == Some(&b'[') {
        if let Some(end) = host.iter().position(|&b| b == b']') {
            let port = host[end + 1..].strip_prefix(b":");
            return (&host[..=end], port);
        }
        return (host, None);
    }
    match host.iter().rposition(|&b| b == b':') {
        Some(colon) => (&host[..colon], Some(&host[colon + 1..])),
        None => (host, None),
    }
}

pub fn build(
    ruby: &Ruby,
    templates: RArray,
    head: &RequestHead,
    conn: &ConnInfo,
    input: Value,
    request: Value,
) -> Result<RHash, Error> {
    let k = keys(ruby)?;
    let template = template_for(templates, head, &conn.listener)?;
    let env = hash_dup(ruby, template)?;
    let bytes = |b: &[u8]| ruby.str_from_slice(b).as_value();

    let method = k
        .methods
        .iter()
        .find(|(name, _)| *name == &head.method[..])
        .map(|(_, s)| ruby.get_inner(*s).as_value())
        .unwrap_or_else(|| bytes(&head.method));
    // One string for both, as Puma gives them.
    let path = bytes(&head.path);
    let query = if head.query.is_empty() {
        ruby.get_inner(k.empty).as_value()
    } else {
        bytes(&head.query)
    };
    let version = match head.version {
        Version::Http11 => k.http11,
        Version::Http10 => k.http10,
        Version::Http2 => k.http2,
    };
    let version = ruby.get_inner(version).as_value();
    let listener = &conn.listener;
    let remote = listener.remote_address.resolve(head, &conn.peer_addr);

    let mut secure = listener.url_scheme == "https";
    if listener.trust_forwarded_proto {
        if let Some(proto) = forwarded_proto(head) {
            secure = proto.eq_ignore_ascii_case(b"https");
        }
    }
    let default_port = || shared_value(ruby, if secure { b"443" } else { b"80" });
    let (server_name, server_port) = match head.host.as_deref().map(split_host) {
        Some((name, port)) => {
            let port = match port {
                Some(p) if !p.is_empty() => shared_value(ruby, p),
                _ => default_port(),
            };
            (shared_value(ruby, name), port)
        }
        None => {
            // A unix socket has no port (0): the scheme's default, as Puma.
            let port = match listener.server_port {
                0 => default_port(),
                p => shared_value(ruby, p.to_string().as_bytes()),
            };
            (shared_value(ruby, listener.server_name.as_bytes()), port)
        }
    };
    let finished = ruby.ary_new().as_value();
    // In `Keys::in_place` order. A local array: on this thread's stack,
    // where Ruby's conservative GC sees the strings made above until they
    // are in the env.
    let values = [
        method,
        path,
        path,
        bytes(&head.target),
        query,
        version,
        version,
        shared_value(ruby, remote.as_bytes()),
        server_name,
        server_port,
        input,
        request,
        finished,
        finished,
    ];
    let in_place = k.in_place().map(|key| ruby.get_inner(key));
    let first = template.len().saturating_sub(IN_PLACE);
    let mut pairs = EnvPairs::new();
    // Before the headers: a header field named like one of these (`Version`
    // is HTTP_VERSION) replaces it, as when every entry was inserted.
    if !fill_in_place(env, first, &in_place, &values) {
        IN_PLACE_MISSES.fetch_add(1, Ordering::Relaxed);
        for (key, value) in in_place.into_iter().zip(values) {
            pairs.push(env, key, value);
        }
    }
    let mut set = |key: Opaque<RString>, value: Value| pairs.push(env, ruby.get_inner(key), value);
    // The base env says "http"; only a different answer costs a store.
    if secure {
        set(k.rack_url_scheme, ruby.get_inner(k.https).as_value());
        set(k.https_key, ruby.get_inner(k.on).as_value());
    } else if listener.url_scheme == "https" {
        set(k.rack_url_scheme, ruby.get_inner(k.http).as_value());
    }

    set_headers(ruby, env, &mut pairs, head)?;
    let mut set = |key: Opaque<RString>, value: Value| pairs.push(env, ruby.get_inner(key), value);
    if head.framing == Framing::Chunked {
        // The body was de-chunked; the app sees its real length instead.
        // The body has already moved into `input`, so its length is there.
        let len = magnus::typed_data::Obj::<Input>::try_convert(input)?.size();
        set(k.content_length, ruby.str_new(&len.to_string()).as_value());
    }

    // Full hijack hands over the socket: under HTTP/2 it carries other
    // streams, so it is not offered there (Rack allows it to be absent).
    // Under TLS HTTP/1.1 the app gets a UNIX socket the engine bridges to
    // the TLS stream (`net/tls_hijack.rs`). Partial hijack (the
    // `rack.hijack` response header) works everywhere: Rack 3's
    // `rack.hijack?` announces just that, so it stays true on HTTP/2; Rack
    // 2's also promises full hijack, so there it is false.
    if head.version == Version::Http2 {
        if !RACK3.load(Ordering::Relaxed) {
            set(k.rack_hijack_p, ruby.qfalse().as_value());
        }
    } else {
        set(k.rack_hijack, request);
        if let Some(offered) = protocols_offered(ruby, head)? {
            set(k.rack_protocol, offered.as_value());
        }
    }
    if let Some(kind) = upgrade_offer(head) {
        set(k.rack_upgrade_p, ruby.to_symbol(kind).as_value());
    }
    pairs.insert_into(env);
    Ok(env)
}

/// Rack 3.1's `rack.protocol`: the protocols the request's `Upgrade`
/// headers offer, in order, trimmed, empty ones left out; `None` without
/// one. Set where the connection can be handed over (HTTP/1, where
/// `rack.hijack` is).
fn protocols_offered(ruby: &Ruby, head: &RequestHead) -> Result<Option<magnus::RArray>, Error> {
    let mut offers = head
        .headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case(b"upgrade"))
        .peekable();
    if offers.peek().is_none() {
        return Ok(None);
    }
    let list = ruby.ary_new();
    for protocol in offers.flat_map(|(_, value)| value.split(|&b| b == b',')) {
        let protocol = protocol.trim_ascii();
        if !protocol.is_empty() {
            list.push(ruby.str_from_slice(protocol))?;
        }
    }
    Ok(Some(list))
}

/// What `rack.upgrade?` offers: "websocket" for an HTTP/1.1 WebSocket
/// upgrade request or an HTTP/2 extended CONNECT with `:protocol
/// websocket` (RFC 8441), "sse" for an HTTP/1 GET that accepts
/// `text/event-stream`, nothing otherwise. Part of the env the engine
/// builds anyway, so a plain request pays two header scans, no call.
fn upgrade_offer(head: &RequestHead) -> Option<&'static str> {
    if head.version == Version::Http2 {
        return tsubame_engine::ws::handshake::is_extended_connect(head).then_some("websocket");
    }
    if tsubame_engine::ws::handshake::is_upgrade_request(head) {
        return Some("websocket");
    }
    let sse = &head.method[..] == b"GET"
        && head
            .header(b"accept")
            .is_some_and(|accept| accept.windows(17).any(|w| w.eq_ignore_ascii_case(b"text/event-stream")));
    sse.then_some("sse")
}

/// The first value of `X-Forwarded-Proto` (a proxy chain lists the
/// client-facing one first).
fn forwarded_proto(head: &RequestHead) -> Option<&[u8]> {
    let (_, value) = head
        .headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(b"x-forwarded-proto"))?;
    value.split(|&b| b == b',').next().map(|v| v.trim_ascii())
}

/// Repeated headers are joined (`cookie` with "; ", others with ", ").
/// A name with `_` is dropped when a `-` spelling of it is present, so a
/// client cannot override `X-Forwarded-For` by sending `X_Forwarded_For`.
fn set_headers(ruby: &Ruby, env: RHash, pairs: &mut EnvPairs, head: &RequestHead) -> Result<(), Error> {
    let k = keys(ruby)?;
    let headers = &head.headers;
    let chunked = head.framing == Framing::Chunked;
    let mut cache = header_cache();
    let mut joined: Vec<u8> = Vec::new();
    for (i, (name, value)) in headers.iter().enumerate() {
        if headers[..i]
            .iter()
            .any(|(earlier, _)| earlier.eq_ignore_ascii_case(name))
        {
            continue;
        }
        if name.contains(&b'_')
            && headers
                .iter()
                .any(|(other, _)| same_cgi_name(other, name) && !other.contains(&b'_'))
        {
            continue;
        }
        if name.contains(&b'_') && (same_cgi_name(name, b"content-length") || same_cgi_name(name, b"transfer-encoding"))
        {
            // Content_Length and Transfer_Encoding framed nothing; under
            // their CGI names they would look to the app as if they had.
            continue;
        }
        let key = if name.eq_ignore_ascii_case(b"content-type") {
            (ruby.get_inner(k.content_type), false)
        } else if name.eq_ignore_ascii_case(b"content-length") {
            // The length the body was framed by, not the field as sent:
            // "5" for "005" or for two identical Content-Length fields.
            if let Framing::Length(len) = head.framing {
                pairs.push(env, ruby.get_inner(k.content_length), decimal(ruby, len).as_value());
            }
            continue;
        } else if chunked && name.eq_ignore_ascii_case(b"transfer-encoding") {
            continue;
        } else {
            header_key(ruby, &mut cache, name)
        };
        let (key, shared) = key;
        let mut repeats = headers[i + 1..]
            .iter()
            .filter(|(later, _)| later.eq_ignore_ascii_case(name))
            .peekable();
        let value = if repeats.peek().is_none() {
            if shared {
                shared_value(ruby, value)
            } else {
                ruby.str_from_slice(value).as_value()
            }
        } else {
            let separator: &[u8] = if name.eq_ignore_ascii_case(b"cookie") {
                b"; "
            } else {
                b", "
            };
            joined.clear();
            joined.extend_from_slice(value);
            for (_, more) in repeats {
                joined.extend_from_slice(separator);
                joined.extend_from_slice(more);
            }
            ruby.str_from_slice(&joined).as_value()
        };
        pairs.push(env, key, value);
    }
    Ok(())
}

/// A u64 as a Ruby string, formatted on the stack.
fn decimal(ruby: &Ruby, mut n: u64) -> RString {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    ruby.str_from_slice(&digits[at..])
}

fn same_cgi_name(a: &[u8], b: &[u8]) -> bool {
    let norm = |c: u8| if c == b'-' { b'_' } else { c.to_ascii_lowercase() };
    a.len() == b.len() && a.iter().zip(b).all(|(&x, &y)| norm(x) == norm(y))
}
