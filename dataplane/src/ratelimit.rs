//! Per-client request limits (ingress-nginx `limit-rps`, `limit-rpm`,
//! `limit-connections`): nginx's `limit_req ... nodelay` accounting, where a client may
//! send `burst` requests beyond the rate at once and each later one must wait its turn,
//! and a cap on the requests a client has in progress. Counts live as long as some
//! config uses the same limits, so a config change does not reset them.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use wharf_model::RateLimit;

/// Clients tracked by one limiter; beyond it the least recently seen is forgotten (as
/// nginx's zone forgets its oldest entries when full).
const MAX_CLIENTS: usize = 100_000;

/// How many of the least recently seen clients a newcomer looks at for one without a
/// request in progress to forget; when all of them have one, it is refused.
const EVICTION_LOOKS: usize = 8;

/// The counts of one zone.
#[derive(Debug)]
pub struct Limiter {
    spec: RateLimit,
    start: Instant,
    clients: Mutex<Table>,
    max_clients: usize,
}

/// No slot.
const NIL: usize = usize::MAX;

/// Clients by address, in the order they were last seen: finding one, moving it to the
/// front and forgetting the last are O(1).
#[derive(Debug, Default)]
struct Table {
    index: HashMap<IpAddr, usize>,
    slots: Vec<Slot>,
    /// Slots of forgotten clients, to reuse.
    free: Vec<usize>,
    /// The most recently seen; `NIL` when empty.
    head: usize,
    /// The least recently seen; `NIL` when empty.
    tail: usize,
}

#[derive(Debug)]
struct Slot {
    ip: IpAddr,
    client: Client,
    prev: usize,
    next: usize,
}

impl Table {
    fn new() -> Table {
        Table { head: NIL, tail: NIL, ..Table::default() }
    }

    fn len(&self) -> usize {
        self.index.len()
    }

    fn get_mut(&mut self, ip: &IpAddr) -> Option<&mut Client> {
        let i = *self.index.get(ip)?;
        Some(&mut self.slots[i].client)
    }

    fn unlink(&mut self, i: usize) {
        let (prev, next) = (self.slots[i].prev, self.slots[i].next);
        match prev {
            NIL => self.head = next,
            p => self.slots[p].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.slots[n].prev = prev,
        }
    }

    fn link_front(&mut self, i: usize) {
        self.slots[i].prev = NIL;
        self.slots[i].next = self.head;
        match self.head {
            NIL => self.tail = i,
            h => self.slots[h].prev = i,
        }
        self.head = i;
    }

    /// The slot of `ip`, moved to the front (added when new: then `true`).
    fn seen(&mut self, ip: IpAddr) -> (usize, bool) {
        if let Some(&i) = self.index.get(&ip) {
            if self.head != i {
                self.unlink(i);
                self.link_front(i);
            }
            return (i, false);
        }
        let slot = Slot { ip, client: Client::default(), prev: NIL, next: NIL };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        };
        self.index.insert(ip, i);
        self.link_front(i);
        (i, true)
    }

    /// Forgets the least recently seen client without a request in progress among the
    /// last `looks`; those with one are moved to the front. False when none was found.
    fn forget_oldest(&mut self, looks: usize) -> bool {
        for _ in 0..looks {
            let i = self.tail;
            if i == NIL {
                return false;
            }
            self.unlink(i);
            if self.slots[i].client.in_flight > 0 {
                self.link_front(i);
                continue;
            }
            self.index.remove(&self.slots[i].ip);
            self.free.push(i);
            return true;
        }
        false
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Client {
    /// Requests beyond the per-second rate, in thousandths, as of `last_ms`.
    second: u64,
    /// Requests beyond the per-minute rate, in thousandths, as of `last_ms`.
    minute: u64,
    last_ms: u64,
    in_flight: u32,
}

/// A request over its client's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited;

/// A request counted against its client's concurrency until dropped.
#[derive(Debug)]
pub struct InFlight {
    limiter: Arc<Limiter>,
    ip: IpAddr,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut clients = self.limiter.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = clients.get_mut(&self.ip) {
            c.in_flight = c.in_flight.saturating_sub(1);
        }
    }
}

/// The excess (in thousandths of a request) with one more request `ms` after the last,
/// draining `rate` requests per `period_ms`: nginx's `excess - rate * ms + 1000`, at
/// least 0.
fn next(excess: u64, rate: u32, period_ms: u64, ms: u64) -> u64 {
    let drain = u128::from(rate) * u128::from(ms) * 1000 / u128::from(period_ms);
    u64::try_from((u128::from(excess) + 1000).saturating_sub(drain)).unwrap_or(u64::MAX)
}

impl Limiter {
    /// A limiter with empty counts.
    pub fn new(spec: RateLimit) -> Arc<Limiter> {
        Limiter::tracking(spec, MAX_CLIENTS)
    }

    fn tracking(spec: RateLimit, max_clients: usize) -> Arc<Limiter> {
        Arc::new(Limiter { spec, start: Instant::now(), clients: Mutex::new(Table::new()), max_clients })
    }

    /// Counts a request from `ip`: `Ok` (holding a place among its requests in progress
    /// when those are limited) or `Err` when it is over a limit.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Option<InFlight>, Limited> {
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.admit_at(ip, now)
    }

    fn admit_at(self: &Arc<Self>, ip: IpAddr, now_ms: u64) -> Result<Option<InFlight>, Limited> {
        let ip = ip.to_canonical();
        let s = &self.spec;
        if s.exempt.iter().any(|n| n.contains(ip)) {
            return Ok(None);
        }
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if clients.len() >= self.max_clients
            && !clients.index.contains_key(&ip)
            && !clients.forget_oldest(EVICTION_LOOKS)
        {
            return Err(Limited);
        }
        let (i, new) = clients.seen(ip);
        let c = &mut clients.slots[i].client;
        let ms = now_ms.saturating_sub(c.last_ms);
        // As nginx: a client's first request starts its count at zero.
        let (mut second, mut minute) = (0, 0);
        if let Some(rate) = s.per_second {
            second = if new { 0 } else { next(c.second, rate, 1000, ms) };
            if second > u64::from(s.burst) * 1000 {
                return Err(Limited);
            }
        }
        if let Some(rate) = s.per_minute {
            minute = if new { 0 } else { next(c.minute, rate, 60_000, ms) };
            if minute > u64::from(s.burst_per_minute) * 1000 {
                return Err(Limited);
            }
        }
        if let Some(max) = s.connections {
            if c.in_flight >= max {
                return Err(Limited);
            }
        }
        (c.second, c.minute, c.last_ms) = (second, minute, now_ms);
        if s.connections.is_none() {
            return Ok(None);
        }
        c.in_flight += 1;
        Ok(Some(InFlight { limiter: Arc::clone(self), ip }))
    }
}

/// Limiters by their limits, kept while a config uses them.
#[derive(Debug, Default)]
pub struct Limiters {
    live: Mutex<HashMap<RateLimit, Weak<Limiter>>>,
}

impl Limiters {
    /// The limiter for `spec`: the one a live config already counts with, or a new one.
    pub fn get(&self, spec: &RateLimit) -> Arc<Limiter> {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = live.get(spec).and_then(Weak::upgrade) {
            return l;
        }
        live.retain(|_, w| w.strong_count() > 0);
        let l = Limiter::new(spec.clone());
        live.insert(spec.clone(), Arc::downgrade(&l));
        l
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wharf_model::IpNet;

    fn spec() -> RateLimit {
        RateLimit {
            zone: "web/app".into(),
            per_second: None,
            per_minute: None,
            burst: 0,
            burst_per_minute: 0,
            connections: None,
            exempt: Vec::new(),
        }
    }

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    /// How many of `n` requests from `ip` at `at_ms` pass.
    fn passed(l: &Arc<Limiter>, ip: IpAddr, at_ms: u64, n: usize) -> usize {
        (0..n).filter(|_| l.admit_at(ip, at_ms).is_ok()).count()
    }

    #[test]
    fn per_second_a_burst_passes_at_once_then_the_rate() {
        // 5 r/s with a burst of 25 (ingress-nginx's multiplier of 5): 26 at once, as nginx.
        let l = Limiter::new(RateLimit { per_second: Some(5), burst: 25, ..spec() });
        assert_eq!(passed(&l, A, 0, 40), 26);
        assert_eq!(passed(&l, B, 0, 40), 26, "each client has its own count");
        assert_eq!(passed(&l, A, 100, 10), 0, "100 ms drains half a request");
        assert_eq!(passed(&l, A, 200, 10), 1, "200 ms drains one");
        assert_eq!(passed(&l, A, 1200, 10), 5, "a second drains five");
        assert_eq!(passed(&l, A, 60_000, 40), 26, "a long pause drains all");
    }

    #[test]
    fn per_minute_and_per_second_both_hold() {
        let l = Limiter::new(RateLimit { per_minute: Some(60), burst_per_minute: 2, ..spec() });
        assert_eq!(passed(&l, A, 0, 10), 3);
        assert_eq!(passed(&l, A, 999, 10), 0);
        assert_eq!(passed(&l, A, 1000, 10), 1, "one a second");
        let both = Limiter::new(RateLimit {
            per_second: Some(10),
            burst: 10,
            per_minute: Some(60),
            burst_per_minute: 3,
            ..spec()
        });
        assert_eq!(passed(&both, A, 0, 20), 4, "the minute's burst is the tighter one");
        // A refused request does not count against the other limit.
        let second_only = passed(&both, A, 1000, 1);
        assert_eq!(second_only, 1);
    }

    #[test]
    fn requests_in_progress_are_capped_until_they_end() {
        let l = Limiter::new(RateLimit { connections: Some(2), ..spec() });
        let one = l.admit_at(A, 0);
        let two = l.admit_at(A, 0);
        assert!(matches!((&one, &two), (Ok(Some(_)), Ok(Some(_)))));
        assert!(l.admit_at(A, 0).is_err(), "a third at once is refused");
        assert!(matches!(l.admit_at(B, 0), Ok(Some(_))), "another client is not");
        drop(one);
        assert!(l.admit_at(A, 0).is_ok(), "a place freed");
        drop(two);
    }

    #[test]
    fn exempt_clients_and_mapped_addresses() {
        let l = Limiter::new(RateLimit {
            per_second: Some(1),
            burst: 0,
            exempt: vec![IpNet::parse("10.0.0.2/32").unwrap_or_else(|e| panic!("{e}"))],
            ..spec()
        });
        assert_eq!(passed(&l, B, 0, 50), 50, "exempt");
        assert_eq!(passed(&l, A, 0, 5), 1);
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap_or(A);
        assert_eq!(passed(&l, mapped, 0, 5), 0, "an IPv4-mapped address is the same client");
    }

    #[test]
    fn limiters_are_shared_while_in_use_and_fresh_after() {
        let reg = Limiters::default();
        let s = RateLimit { per_second: Some(1), ..spec() };
        let a = reg.get(&s);
        assert!(Arc::ptr_eq(&a, &reg.get(&s)));
        let other = reg.get(&RateLimit { zone: "web/other".into(), ..s.clone() });
        assert!(!Arc::ptr_eq(&a, &other), "another zone counts apart");
        assert!(Arc::ptr_eq(&a, &reg.get(&s)), "a limiter in use is kept when others are added");
        drop(a);
        let b = reg.get(&s);
        assert_eq!(passed(&b, A, 0, 2), 1, "fresh counts");
        drop((b, other));
        let _third = reg.get(&RateLimit { zone: "web/third".into(), ..s.clone() });
        assert_eq!(reg.live.lock().map(|l| l.len()).unwrap_or(0), 1, "limiters no config uses are dropped");
    }

    fn ip(i: u32) -> IpAddr {
        IpAddr::V4(std::net::Ipv4Addr::from(i))
    }

    /// The tracked clients, most recently seen first, walked both ways.
    fn order(l: &Limiter) -> Vec<IpAddr> {
        let t = l.clients.lock().unwrap_or_else(|e| e.into_inner());
        let (mut fwd, mut back) = (Vec::new(), Vec::new());
        let mut i = t.head;
        while i != NIL {
            fwd.push(t.slots[i].ip);
            i = t.slots[i].next;
        }
        let mut i = t.tail;
        while i != NIL {
            back.push(t.slots[i].ip);
            i = t.slots[i].prev;
        }
        back.reverse();
        assert_eq!(fwd, back, "the links agree");
        assert_eq!(fwd.len(), t.len());
        fwd
    }

    #[test]
    fn a_full_table_forgets_the_least_recently_seen_client() {
        let l = Limiter::tracking(RateLimit { per_second: Some(1), burst: 0, ..spec() }, 3);
        for i in 1..=3 {
            assert_eq!(passed(&l, ip(i), 0, 1), 1);
        }
        assert_eq!(passed(&l, ip(1), 0, 1), 0, "1 is seen again (and refused)");
        assert_eq!(order(&l), [ip(1), ip(3), ip(2)]);
        // A newcomer takes the place of 2, the least recently seen, at once.
        assert_eq!(passed(&l, ip(4), 0, 1), 1);
        assert_eq!(order(&l), [ip(4), ip(1), ip(3)]);
        assert_eq!(passed(&l, ip(1), 0, 1), 0, "1 keeps its count");
        assert_eq!(passed(&l, ip(2), 0, 1), 1, "2 was forgotten: a new client");
        assert_eq!(order(&l), [ip(2), ip(1), ip(4)]);
        // The forgotten slots are reused: the table does not grow.
        for i in 10..1000 {
            assert_eq!(passed(&l, ip(i), 0, 1), 1);
        }
        let t = l.clients.lock().unwrap_or_else(|e| e.into_inner());
        assert_eq!((t.len(), t.slots.len()), (3, 3));
        drop(t);
        assert_eq!(MAX_CLIENTS, 100_000);
        assert_eq!(order(&Limiter::tracking(spec(), 1)), Vec::<IpAddr>::new());
    }

    #[test]
    fn clients_with_requests_in_progress_are_never_forgotten() {
        let l = Limiter::tracking(RateLimit { connections: Some(5), ..spec() }, 2);
        let held = (l.admit_at(A, 0), l.admit_at(B, 0));
        assert!(matches!(held, (Ok(Some(_)), Ok(Some(_)))));
        let c: IpAddr = [10, 0, 0, 3].into();
        assert!(l.admit_at(c, 10_000).is_err(), "both still have a request in progress");
        assert_eq!(order(&l).len(), 2);
        drop(held.1);
        assert!(l.admit_at(c, 10_000).is_ok(), "B has none left: forgotten");
        assert_eq!(order(&l), [c, A]);
        drop(held.0);
        // Only the last EVICTION_LOOKS are looked at: behind more in progress, refused.
        let l = Limiter::tracking(RateLimit { connections: Some(5), ..spec() }, EVICTION_LOOKS + 1);
        let idle = ip(100);
        let _ = l.admit_at(idle, 0);
        let held: Vec<_> = (0..EVICTION_LOOKS as u32).map(|i| l.admit_at(ip(i), 0)).collect();
        assert!(held.iter().all(|h| matches!(h, Ok(Some(_)))));
        // The oldest, `idle`, has no request in progress (its guard was dropped).
        assert!(l.admit_at(ip(200), 0).is_ok(), "the idle one is within reach");
        assert!(l.admit_at(ip(201), 0).is_err(), "the next eight all have one");
        // Those looked at went to the front: the order still holds every client once.
        assert_eq!(order(&l).len(), EVICTION_LOOKS + 1);
    }

    #[test]
    fn admit_counts_on_the_clock() {
        let l = Limiter::new(RateLimit { per_minute: Some(1), burst_per_minute: 0, ..spec() });
        assert!(l.admit(A).is_ok());
        assert_eq!(l.admit(A).err(), Some(Limited), "a second request within the minute");
        let conns = Limiter::new(RateLimit { connections: Some(1), ..spec() });
        let first = conns.admit(A);
        assert!(matches!(first, Ok(Some(_))));
        assert!(conns.admit(A).is_err());
    }
}
