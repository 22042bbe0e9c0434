//! YCSB's number generators, with YCSB's arithmetic: Java `long` wrap-around, the FNV-1a
//! variant of `Utils.fnvhash64`, Gray et al.'s zipfian sampler with its constants, the
//! scrambled zipfian over ten billion items, the skewed-latest generator and the acknowledged
//! insert counter.
//!
//! The random stream differs from Java's `ThreadLocalRandom` (a splitmix64 here), so runs
//! pick different keys than a Java YCSB run with the same properties, with the same
//! distributions.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;

/// YCSB's default zipfian constant (`ZipfianGenerator.ZIPFIAN_CONSTANT`).
pub const ZIPFIAN_CONSTANT: f64 = 0.99;
/// `ScrambledZipfianGenerator.ITEM_COUNT`: the scrambled generator draws ranks among ten
/// billion items and folds them onto the key space with a hash.
pub const SCRAMBLED_ITEM_COUNT: i64 = 10_000_000_000;
/// `ScrambledZipfianGenerator.ZETAN`: zeta(ITEM_COUNT, 0.99), precomputed by YCSB.
pub const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;

const FNV_OFFSET_BASIS_64: i64 = 0xCBF2_9CE4_8422_2325_u64 as i64;
const FNV_PRIME_64: i64 = 1_099_511_628_211;

/// `Utils.fnvhash64`: FNV-1a over the eight low-first bytes of `val`, then `Math.abs`
/// (which leaves `i64::MIN` negative, as Java does).
pub fn fnv_hash64(mut val: i64) -> i64 {
    let mut hash = FNV_OFFSET_BASIS_64;
    for _ in 0..8 {
        let octet = val & 0xff;
        val >>= 8;
        hash ^= octet;
        hash = hash.wrapping_mul(FNV_PRIME_64);
    }
    hash.wrapping_abs()
}

/// Java's `String.hashCode` for ASCII text: `s[0]*31^(n-1) + ... + s[n-1]`, wrapping in
/// `int`. YCSB's Redis binding scores each key in the `_indices` sorted set with it.
pub fn java_string_hash(text: &[u8]) -> i32 {
    text.iter()
        .fold(0i32, |h, &b| h.wrapping_mul(31).wrapping_add(i32::from(b)))
}

/// A small, fast, seedable generator (splitmix64). Each client thread owns one.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A double in [0, 1) with 53 random bits, like `Random.nextDouble`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// `ZipfianGenerator.zetastatic`: `initial + sum_{i=st}^{n-1} 1/(i+1)^theta`.
pub fn zeta(st: i64, n: i64, theta: f64, initial: f64) -> f64 {
    let mut sum = initial;
    for i in st..n {
        sum += 1.0 / ((i + 1) as f64).powf(theta);
    }
    sum
}

/// `UniformLongGenerator`: `lb + (long)(nextDouble() * (ub - lb + 1))`.
#[derive(Clone, Debug)]
pub struct Uniform {
    lb: i64,
    interval: f64,
}

impl Uniform {
    /// Uniform over `lb..=ub`.
    pub fn new(lb: i64, ub: i64) -> Uniform {
        Uniform {
            lb,
            interval: (ub - lb + 1) as f64,
        }
    }

    /// The next value.
    pub fn next(&self, rng: &mut Rng) -> i64 {
        self.lb + (rng.next_f64() * self.interval) as i64
    }
}

/// `ZipfianGenerator`: item `base + i` with probability proportional to `1/(i+1)^theta`,
/// by Gray et al.'s method ("Quickly generating billion-record synthetic databases", 1994),
/// with YCSB's incremental update of zeta(n) when the item count grows.
#[derive(Clone, Debug)]
pub struct Zipfian {
    items: i64,
    base: i64,
    theta: f64,
    zeta2theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    count_for_zeta: i64,
}

impl Zipfian {
    /// Items `min..=max` with the given constant; zeta(n) computed here (O(n)) unless given.
    pub fn new(min: i64, max: i64, theta: f64, zetan: Option<f64>) -> Zipfian {
        let items = max - min + 1;
        let zeta2theta = zeta(0, 2, theta, 0.0);
        let zetan = zetan.unwrap_or_else(|| zeta(0, items, theta, 0.0));
        let eta = (1.0 - (2.0 / items as f64).powf(1.0 - theta)) / (1.0 - zeta2theta / zetan);
        Zipfian {
            items,
            base: min,
            theta,
            zeta2theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta,
            count_for_zeta: items,
        }
    }

    /// `ZipfianGenerator.nextValue()`: a value among the generator's own items.
    pub fn next(&mut self, rng: &mut Rng) -> i64 {
        self.next_of(rng, self.items)
    }

    /// `ZipfianGenerator.nextLong(itemcount)`: a value among `itemcount` items. A larger
    /// count than last time extends zeta(n) incrementally; as in YCSB, eta is then
    /// recomputed with the constructor's item count, and a smaller count is ignored
    /// (YCSB's default `allowitemcountdecrease = false`).
    pub fn next_of(&mut self, rng: &mut Rng, itemcount: i64) -> i64 {
        self.grow(itemcount);
        let u = rng.next_f64();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return self.base;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return self.base + 1;
        }
        self.base + (itemcount as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as i64
    }

    /// Extends zeta(n) to `itemcount` items if that is more than before (what
    /// [`Zipfian::next_of`] does first).
    pub fn grow(&mut self, itemcount: i64) {
        if itemcount > self.count_for_zeta {
            self.zetan = zeta(self.count_for_zeta, itemcount, self.theta, self.zetan);
            self.count_for_zeta = itemcount;
            self.eta = (1.0 - (2.0 / self.items as f64).powf(1.0 - self.theta))
                / (1.0 - self.zeta2theta / self.zetan);
        }
    }

    /// zeta(n) currently in use.
    pub fn zetan(&self) -> f64 {
        self.zetan
    }

    /// The sampler's own law: the probability that [`Zipfian::next`] returns at most
    /// `base + rank`. Ranks 0 and 1 get exactly `1/zetan` and `2^-theta/zetan`; from rank 2
    /// on, Gray's method follows a continuous approximation of the law (rank 2 gets about
    /// 20 % more than `3^-theta/zetan`), which is what YCSB runs and what is checked here.
    pub fn cdf(&self, rank: i64) -> f64 {
        let u1 = (1.0 + 0.5f64.powf(self.theta)) / self.zetan;
        match rank {
            r if r < 0 => 0.0,
            0 => 1.0 / self.zetan,
            1 => u1,
            r => {
                // floor(n (eta (u-1) + 1)^alpha) <= r  <=>  u < 1 + (((r+1)/n)^(1-theta) - 1)/eta
                let k = (r + 1) as f64 / self.count_for_zeta as f64;
                (1.0 + (k.powf(1.0 - self.theta) - 1.0) / self.eta).clamp(u1, 1.0)
            }
        }
    }

    /// The probability that [`Zipfian::next`] returns `base + rank`.
    pub fn probability(&self, rank: i64) -> f64 {
        self.cdf(rank) - self.cdf(rank - 1)
    }
}

/// `ScrambledZipfianGenerator`: zipfian popularity (constant 0.99) spread over the key
/// space: a rank among [`SCRAMBLED_ITEM_COUNT`] items, hashed with [`fnv_hash64`], modulo the
/// item count. The most popular key is chosen with probability about `1/SCRAMBLED_ZETAN`
/// (3.78 %), whatever the key space's size.
#[derive(Clone, Debug)]
pub struct ScrambledZipfian {
    gen: Zipfian,
    min: i64,
    itemcount: i64,
}

impl ScrambledZipfian {
    /// Keys `min..=max`.
    pub fn new(min: i64, max: i64) -> ScrambledZipfian {
        ScrambledZipfian {
            gen: Zipfian::new(
                0,
                SCRAMBLED_ITEM_COUNT,
                ZIPFIAN_CONSTANT,
                Some(SCRAMBLED_ZETAN),
            ),
            min,
            itemcount: max - min + 1,
        }
    }

    /// The next key number.
    pub fn next(&mut self, rng: &mut Rng) -> i64 {
        let rank = self.gen.next(rng);
        self.min + fnv_hash64(rank) % self.itemcount
    }

    /// The key number of popularity rank `rank` (0: the most popular), collisions aside.
    pub fn key_of_rank(&self, rank: i64) -> i64 {
        self.min + fnv_hash64(rank) % self.itemcount
    }

    /// The probability of drawing popularity rank `rank` (see [`Zipfian::probability`]).
    pub fn rank_probability(&self, rank: i64) -> f64 {
        self.gen.probability(rank)
    }

    /// The probability of drawing a rank up to `rank`.
    pub fn rank_cdf(&self, rank: i64) -> f64 {
        self.gen.cdf(rank)
    }
}

/// `AcknowledgedCounterGenerator`: hands out insert key numbers; `last_value` is the largest
/// number below which every number handed out has been acknowledged (inserted), so readers
/// never choose a key whose insert is still in flight.
#[derive(Debug)]
pub struct AcknowledgedCounter {
    next: AtomicI64,
    limit: AtomicI64,
    window: Mutex<Vec<bool>>,
}

/// `AcknowledgedCounterGenerator.WINDOW_SIZE`.
const ACK_WINDOW: usize = 1 << 20;

impl AcknowledgedCounter {
    /// Counting from `start`; `last_value` is `start - 1` until `start` is acknowledged.
    pub fn new(start: i64) -> AcknowledgedCounter {
        AcknowledgedCounter {
            next: AtomicI64::new(start),
            limit: AtomicI64::new(start - 1),
            window: Mutex::new(vec![false; ACK_WINDOW]),
        }
    }

    /// The next number to insert.
    pub fn next(&self) -> i64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// The highest number such that it and every number before it are acknowledged.
    pub fn last_value(&self) -> i64 {
        self.limit.load(Ordering::Acquire)
    }

    /// Marks `value` inserted and advances `last_value` over the acknowledged run.
    pub fn acknowledge(&self, value: i64) {
        let mask = (ACK_WINDOW - 1) as i64;
        let mut window = self.window.lock().unwrap_or_else(|p| p.into_inner());
        let slot = (value & mask) as usize;
        assert!(!window[slot], "too many unacknowledged insertion keys");
        window[slot] = true;
        let mut limit = self.limit.load(Ordering::Acquire);
        // At most ACK_WINDOW steps: each clears a slot that was set.
        for _ in 0..ACK_WINDOW {
            let next = ((limit + 1) & mask) as usize;
            if !window[next] {
                break;
            }
            window[next] = false;
            limit += 1;
        }
        self.limit.store(limit, Ordering::Release);
    }
}

/// `SkewedLatestGenerator`: the most recently inserted keys are the most popular:
/// `last - zipfian(last)`, where `last` is the insert counter's acknowledged limit.
#[derive(Clone, Debug)]
pub struct SkewedLatest {
    zipfian: Zipfian,
}

impl SkewedLatest {
    /// Skewed towards the counter's current `last_value` (and later ones as it grows).
    pub fn new(basis: &AcknowledgedCounter) -> SkewedLatest {
        let items = basis.last_value().max(2);
        SkewedLatest {
            zipfian: Zipfian::new(0, items - 1, ZIPFIAN_CONSTANT, None),
        }
    }

    /// The next key number.
    pub fn next(&mut self, rng: &mut Rng, basis: &AcknowledgedCounter) -> i64 {
        self.next_with_max(rng, basis).0
    }

    /// The next key number and the newest acknowledged key it was drawn below.
    pub fn next_with_max(&mut self, rng: &mut Rng, basis: &AcknowledgedCounter) -> (i64, i64) {
        let max = basis.last_value();
        (max - self.zipfian.next_of(rng, max), max)
    }
}

/// `DiscreteGenerator`: one of several values, each with a weight.
#[derive(Clone, Debug)]
pub struct Discrete<T: Copy> {
    values: Vec<(f64, T)>,
    sum: f64,
}

impl<T: Copy> Discrete<T> {
    /// Values with weights (zero weights are left out by the caller, as YCSB does).
    pub fn new(values: Vec<(f64, T)>) -> Discrete<T> {
        let sum = values.iter().map(|v| v.0).sum();
        Discrete { values, sum }
    }

    /// The next value (`None` only if there are no values).
    pub fn next(&self, rng: &mut Rng) -> Option<T> {
        let mut val = rng.next_f64();
        for &(weight, value) in &self.values {
            let share = weight / self.sum;
            if val < share {
                return Some(value);
            }
            val -= share;
        }
        self.values.last().map(|v| v.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLES: usize = 400_000;

    /// Tolerance for a frequency `p` estimated from `n` samples: 5 standard deviations.
    fn tol(p: f64, n: usize) -> f64 {
        5.0 * (p * (1.0 - p) / n as f64).sqrt()
    }

    #[test]
    fn fnv_and_key_hash_match_ycsb() {
        // YCSB's first key with insertorder=hashed is "user6284781860667377211".
        assert_eq!(fnv_hash64(0), 6_284_781_860_667_377_211);
        assert_eq!(fnv_hash64(1), 8_517_097_267_634_966_620);
        assert_eq!(fnv_hash64(99_999), 7_592_201_923_306_675_823);
        assert_eq!(java_string_hash(b"user6284781860667377211"), -594_971_599);
        assert_eq!(java_string_hash(b""), 0);
        assert_eq!(java_string_hash(b"a"), 97);
    }

    #[test]
    fn scrambled_zetan_is_zeta_of_ten_billion() {
        // Exact sum of the first million terms, then the midpoint-rule integral of the rest
        // (error far below 1e-9 for this smooth tail).
        let m = 1_000_000i64;
        let head = zeta(0, m, 0.99, 0.0);
        let f = |x: f64| x.powf(0.01) / 0.01;
        let tail = f(SCRAMBLED_ITEM_COUNT as f64 + 0.5) - f(m as f64 + 0.5);
        let approx = head + tail;
        assert!(
            (approx - SCRAMBLED_ZETAN).abs() < 1e-6,
            "{approx} vs {SCRAMBLED_ZETAN}"
        );
    }

    #[test]
    fn zipfian_matches_its_distribution() {
        let n = 1000i64;
        let mut z = Zipfian::new(0, n - 1, ZIPFIAN_CONSTANT, None);
        let mut rng = Rng::new(1);
        let mut counts = vec![0usize; n as usize];
        for _ in 0..SAMPLES {
            let v = z.next(&mut rng);
            assert!((0..n).contains(&v));
            counts[v as usize] += 1;
        }
        let zn = zeta(0, n, 0.99, 0.0);
        assert!((z.zetan() - zn).abs() < 1e-12);
        // Ranks 0 and 1 are exactly the zipfian law 1/(i+1)^0.99/zeta(n).
        for (rank, &count) in counts.iter().enumerate().take(2) {
            let p = 1.0 / ((rank + 1) as f64).powf(0.99) / zn;
            assert!((z.probability(rank as i64) - p).abs() < 1e-12);
            let got = count as f64 / SAMPLES as f64;
            assert!(
                (got - p).abs() < tol(p, SAMPLES),
                "rank {rank}: {got} vs {p}"
            );
        }
        // Every rank follows the sampler's law (Gray's approximation from rank 2 on).
        for (rank, &count) in counts.iter().enumerate().take(20) {
            let p = z.probability(rank as i64);
            let got = count as f64 / SAMPLES as f64;
            assert!(
                (got - p).abs() < tol(p, SAMPLES),
                "rank {rank}: {got} vs {p}"
            );
        }
        // ... which is close to the zipfian law in the mass of the top ranks.
        for top in [10usize, 100] {
            let law: f64 = (0..top)
                .map(|i| 1.0 / ((i + 1) as f64).powf(0.99))
                .sum::<f64>()
                / zn;
            let p = z.cdf(top as i64 - 1);
            let got = counts[..top].iter().sum::<usize>() as f64 / SAMPLES as f64;
            assert!((got - p).abs() < tol(p, SAMPLES), "top {top}: {got} vs {p}");
            assert!(
                (p - law).abs() < 0.02,
                "top {top}: sampler {p} vs law {law}"
            );
        }
    }

    #[test]
    fn scrambled_zipfian_top_key_has_one_over_zetan() {
        let n = 100_000i64;
        let mut z = ScrambledZipfian::new(0, n - 1);
        let mut rng = Rng::new(2);
        let mut counts = std::collections::HashMap::new();
        for _ in 0..SAMPLES {
            let v = z.next(&mut rng);
            assert!((0..n).contains(&v));
            *counts.entry(v).or_insert(0usize) += 1;
        }
        // Rank 0: 1/ZETAN; from rank 2 on, Gray's approximation (kept, as YCSB has it).
        assert!((z.rank_probability(0) - 1.0 / SCRAMBLED_ZETAN).abs() < 1e-12);
        for rank in 0..5 {
            let p = z.rank_probability(rank);
            let key = z.key_of_rank(rank);
            let got = counts.get(&key).copied().unwrap_or(0) as f64 / SAMPLES as f64;
            // Other ranks folding onto the same key add about 1/n.
            assert!(
                (got - p).abs() < tol(p, SAMPLES) + 2.0 / n as f64,
                "rank {rank}: {got} vs {p}"
            );
        }
        // Many distinct keys are touched: the popularity is spread by the hash.
        assert!(counts.len() > 50_000, "{} distinct keys", counts.len());
    }

    #[test]
    fn skewed_latest_prefers_the_newest_key() {
        let n = 10_000i64;
        let counter = AcknowledgedCounter::new(n);
        // Load phase done: keys 0..n exist; last_value is n - 1.
        assert_eq!(counter.last_value(), n - 1);
        let mut gen = SkewedLatest::new(&counter);
        let mut rng = Rng::new(3);
        let (mut newest, mut second) = (0usize, 0usize);
        for _ in 0..SAMPLES {
            let v = gen.next(&mut rng, &counter);
            assert!((0..n).contains(&v), "{v}");
            newest += usize::from(v == n - 1);
            second += usize::from(v == n - 2);
        }
        let zn = zeta(0, n - 1, 0.99, 0.0);
        let p0 = 1.0 / zn;
        let p1 = 1.0 / 2f64.powf(0.99) / zn;
        let got0 = newest as f64 / SAMPLES as f64;
        let got1 = second as f64 / SAMPLES as f64;
        assert!((got0 - p0).abs() < tol(p0, SAMPLES), "{got0} vs {p0}");
        assert!((got1 - p1).abs() < tol(p1, SAMPLES), "{got1} vs {p1}");
        // New inserts move the skew: after acknowledging n, the newest is n.
        let k = counter.next();
        assert_eq!(k, n);
        counter.acknowledge(k);
        let mut hits = 0usize;
        for _ in 0..SAMPLES / 10 {
            hits += usize::from(gen.next(&mut rng, &counter) == n);
        }
        let p = 1.0 / zeta(0, n, 0.99, 0.0);
        let got = hits as f64 / (SAMPLES / 10) as f64;
        assert!((got - p).abs() < tol(p, SAMPLES / 10), "{got} vs {p}");
    }

    #[test]
    fn uniform_covers_its_range_evenly() {
        let u = Uniform::new(1, 100);
        let mut rng = Rng::new(4);
        let mut counts = [0usize; 101];
        for _ in 0..SAMPLES {
            let v = u.next(&mut rng);
            assert!((1..=100).contains(&v), "{v}");
            counts[v as usize] += 1;
        }
        // Chi-square with 99 degrees of freedom: 99 +- 14; 160 is far in the tail.
        let expected = SAMPLES as f64 / 100.0;
        let chi2: f64 = counts[1..]
            .iter()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum();
        assert!(chi2 < 160.0, "chi2 {chi2}");
    }

    #[test]
    fn acknowledged_counter_waits_for_gaps() {
        let c = AcknowledgedCounter::new(100);
        let (a, b, d) = (c.next(), c.next(), c.next());
        assert_eq!((a, b, d), (100, 101, 102));
        c.acknowledge(b);
        c.acknowledge(d);
        assert_eq!(c.last_value(), 99, "100 still in flight");
        c.acknowledge(a);
        assert_eq!(c.last_value(), 102);
    }

    #[test]
    fn discrete_follows_weights() {
        let d = Discrete::new(vec![(0.95, 'r'), (0.05, 'i')]);
        let mut rng = Rng::new(5);
        let inserts = (0..SAMPLES)
            .filter(|_| d.next(&mut rng) == Some('i'))
            .count();
        let got = inserts as f64 / SAMPLES as f64;
        assert!((got - 0.05).abs() < tol(0.05, SAMPLES), "{got}");
    }
}
