//! [`Log`]: create, open (recovery), append, iterate, truncate.

use std::marker::PhantomData;
use std::ops::{Deref, Range};

use mnemo_pmem::{mutant, ByteRange, Pool, SyncKind, SyncPoint};

use crate::error::Error;
use crate::format::{
    self, choose, crc_prefix, encode_payload, free_word, length_word, parse_length_word,
    payload_max_for, payload_words, record_crc, record_words, sense_of_pass, torn_bit, CopyProblem,
    Header, AREA_MIN, AREA_WORDS_MAX, CRC_PREFIX, ENTRY_LEN_MAX, HEADER_AREA, HEADER_COPY_SIZE,
    REGION_ALIGN,
};

const CACHE_LINE: u64 = mnemo_pmem::limits::CACHE_LINE;

/// Log sequence number: the logical byte position of an entry in the log's unbounded stream
/// (a multiple of 8). LSNs grow strictly with every entry, survive reopen, and are never
/// reused; they are not dense (an entry of `n` bytes advances the next LSN by its record size).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(u64);

impl Lsn {
    /// The LSN as a number (logical byte position).
    pub fn get(self) -> u64 {
        self.0
    }

    /// An LSN from a number returned by [`Lsn::get`].
    pub fn from_raw(raw: u64) -> Lsn {
        Lsn(raw)
    }

    fn of_word(word: u64) -> Lsn {
        Lsn(word * 8)
    }
}

impl std::fmt::Display for Lsn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// One complete entry read back from the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Where it is.
    pub lsn: Lsn,
    /// What was appended.
    pub data: Vec<u8>,
}

/// Counters of this handle since it was created or opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Successful `append` and `append_many` calls.
    pub appends: u64,
    /// Entries written by them.
    pub entries: u64,
    /// Fences (sync points) issued by appends and header writes.
    pub fences: u64,
    /// Cache lines named in the flushes of appends and header writes.
    pub lines_flushed: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Open,
    Closed,
    Poisoned,
}

/// An append-only log in a region of a pool. See the crate documentation.
///
/// `P` is how the log holds its pool: `&Pool`, `Arc<Pool>`, `Box<Pool>`...
#[derive(Debug)]
pub struct Log<P: Deref<Target = Pool>> {
    pool: P,
    /// Pool offsets of the region given at create/open.
    start: u64,
    end: u64,
    /// Pool offset of the entries area (after the two header copies).
    area: u64,
    /// Words in the entries area.
    cap: u64,
    header: Header,
    /// Logical word index of the oldest live entry and one past the newest.
    head: u64,
    tail: u64,
    /// Where the next record goes: `tail % cap` and its torn bit, kept so appends never divide.
    next: Cursor,
    entries: u64,
    stats: Stats,
    state: State,
    /// The words of the records being appended in local mode, as bytes.
    staged: Vec<u8>,
}

/// A position in the ring and the torn bit a write there carries now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cursor {
    pos: u64,
    sense: u64,
}

impl Cursor {
    fn at(word: u64, cap: u64) -> Cursor {
        Cursor {
            pos: word % cap,
            sense: sense_of_pass(word / cap),
        }
    }

    #[inline]
    fn advance(&mut self, cap: u64) {
        self.pos += 1;
        if self.pos == cap {
            self.pos = 0;
            if !mutant::active("log.skip_sense_flip") {
                self.sense ^= 1;
            }
        }
    }
}

/// The entries area as words, for the length of one borrow of the pool.
#[derive(Clone, Copy)]
struct Area<'a> {
    base: *mut u64,
    cap: u64,
    _pool: PhantomData<&'a Pool>,
}

impl<'a> Area<'a> {
    fn new(pool: &'a Pool, offset: u64, cap: u64) -> Result<Area<'a>, Error> {
        let base = pool.ptr(offset, cap * 8)?.as_ptr().cast::<u64>();
        assert!(base.is_aligned(), "log area not 8-byte aligned");
        Ok(Area {
            base,
            cap,
            _pool: PhantomData,
        })
    }

    /// One 8-byte load (volatile: exactly one, so the value checked is the value used).
    #[inline]
    fn load(&self, pos: u64) -> u64 {
        assert!(pos < self.cap);
        // SAFETY: `pos < cap`, and `base..base + cap` words lie inside the pool's mapping
        // (checked by `Pool::ptr` in `Area::new`), 8-byte aligned (asserted there); the
        // mapping stays in place while the `&'a Pool` borrow lives.
        u64::from_le(unsafe { self.base.add(pos as usize).read_volatile() })
    }

    /// One 8-byte store (volatile: never split or merged, so torn bits stay 8-byte atomic).
    #[inline]
    fn store(&self, pos: u64, word: u64) {
        assert!(pos < self.cap);
        // SAFETY: as in `load`; the log is the only writer of its region (`&mut Log`).
        unsafe { self.base.add(pos as usize).write_volatile(word.to_le()) }
    }
}

/// What reading one record found.
enum Read {
    Record { words: u64, more: bool },
    End,
    Corrupt(String),
}

/// Records shorter than this many words (payloads up to 168 bytes) are appended from a
/// buffer on the stack ([`Log::append`]'s fast path); longer ones are staged in a `Vec`.
const SMALL_WORDS: usize = 24;

/// The checksum of a single record (`more` clear) at logical word `at` whose payload words
/// (torn bits clear) are `payload`, as [`format::record_crc`] defines it; sets the torn bit
/// `sense` (bit 63 set or not) in every payload word and leaves them little-endian.
#[inline]
fn small_crc(at: u64, len: usize, payload: &mut [u64], sense: u64) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE4.2 (checked just above).
        return unsafe { small_crc_sse42(at, len, payload, sense) };
    }
    small_crc_portable(at, len, payload, sense)
}

/// [`small_crc`] without the CRC-32C instruction (the `crc32c` crate over the bytes).
fn small_crc_portable(at: u64, len: usize, payload: &mut [u64], sense: u64) -> u32 {
    let mut prefix = [0u64; 2];
    prefix[0] = at.to_le();
    prefix[1] = (len as u64).to_le();
    let crc = crc32c::crc32c(words_as_bytes(&prefix));
    for word in payload.iter_mut() {
        *word = word.to_le();
    }
    let crc = crc32c::crc32c_append(crc, words_as_bytes(payload));
    for word in payload.iter_mut() {
        *word |= sense.to_le();
    }
    crc
}

/// [`small_crc`] with the CRC-32C instruction: the words are checksummed from registers, one
/// instruction each, in the same pass that sets their torn bits.
///
/// # Safety
/// The CPU must support SSE4.2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn small_crc_sse42(at: u64, len: usize, payload: &mut [u64], sense: u64) -> u32 {
    use std::arch::x86_64::_mm_crc32_u64;
    // CRC-32C of bytes = !(the instruction's chain from !0), each u64 taken little-endian.
    let mut crc = _mm_crc32_u64(u64::from(u32::MAX), at);
    crc = _mm_crc32_u64(crc, len as u64);
    for word in payload.iter_mut() {
        crc = _mm_crc32_u64(crc, *word);
        *word = (*word | sense).to_le();
    }
    !(crc as u32)
}

/// The bytes of `words` as they lie in memory (the words are already little-endian).
#[inline]
fn words_as_bytes(words: &[u64]) -> &[u8] {
    // SAFETY: any initialised u64 is 8 initialised bytes; the slice covers exactly `words`
    // and borrows it for its lifetime; u8 has alignment 1.
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), std::mem::size_of_val(words)) }
}

fn lines_of(offset: u64, len: u64) -> u64 {
    if len == 0 {
        0
    } else {
        (offset + len - 1) / CACHE_LINE - offset / CACHE_LINE + 1
    }
}

/// Encode one record at logical word `at` (`cursor` at it) onto the end of `staged`, as the
/// bytes its words will have on media; the cursor ends after the record. Built in place: the
/// checksum prefix goes where the length word will be
/// (8 bytes longer), so one CRC call covers prefix and payload, then the payload moves down.
#[inline]
fn stage_record(
    staged: &mut Vec<u8>,
    cap: u64,
    cursor: &mut Cursor,
    at: u64,
    data: &[u8],
    more: bool,
) {
    let base = staged.len();
    staged.reserve(CRC_PREFIX + 8 * payload_words(data.len()));
    staged.extend_from_slice(&crc_prefix(at, data.len(), more));
    encode_payload(data, |word| staged.extend_from_slice(&word.to_le_bytes()));
    let crc = crc32c::crc32c(&staged[base..]);
    staged.copy_within(base + CRC_PREFIX.., base + 8);
    staged.truncate(staged.len() - (CRC_PREFIX - 8));
    staged[base..base + 8].copy_from_slice(&length_word(data.len(), more, crc).to_le_bytes());
    for word in staged[base..].chunks_exact_mut(8) {
        // Bit 63 of a little-endian word is the top bit of its last byte.
        word[7] |= (cursor.sense as u8) << 7;
        cursor.advance(cap);
    }
}

impl<P: Deref<Target = Pool>> Log<P> {
    /// Format `range` (pool offsets; start 64-byte aligned) as an empty log and return it.
    /// Whatever the region held is overwritten. Costs four fences and a pass over the area.
    pub fn create(pool: P, range: Range<u64>) -> Result<Log<P>, Error> {
        let cap = check_region(&pool, &range)?;
        let (start, end) = (range.start, range.end);
        ensure_backed(&pool, start, end - start)?;
        // 1. No valid header while the area is cleaned: a crash leaves "not formatted".
        pool.write(start, &[0u8; HEADER_AREA as usize])?;
        mnemo_pmem::durable_site!(
            "log.create_clear",
            pool.sync(&SyncPoint::new(
                SyncKind::Metadata,
                &[ByteRange::new(start, HEADER_AREA)],
            ))
        )?;
        let header = Header {
            region_len: end - start,
            capacity_words: cap,
            head_word: 0,
            generation: 1,
        };
        let mut log = Log {
            area: start + HEADER_AREA,
            cap,
            header: header.clone(),
            head: 0,
            tail: 0,
            next: Cursor::at(0, cap),
            entries: 0,
            stats: Stats::default(),
            state: State::Open,
            staged: Vec::new(),
            start,
            end,
            pool,
        };
        // 2. Every word free for pass 0 (zero).
        log.repair(true)?;
        // 3. Generation 1 into copy 1, then generation 2 into copy 0. From then on both
        // copies are valid except while one is being rewritten, so "one copy zero, the other
        // invalid" can only be a create that did not complete (open: `NotFormatted`).
        log.put_header(header)?;
        log.move_head(0)?;
        Ok(log)
    }

    /// Open the log in `range` and recover it: find exactly the complete appends after the
    /// head, and make the space after them ready for the next append. Returns the log and the
    /// number of live entries.
    pub fn open(pool: P, range: Range<u64>) -> Result<(Log<P>, u64), Error> {
        let cap = check_region(&pool, &range)?;
        let (start, end) = (range.start, range.end);
        ensure_backed(&pool, start, end - start)?;
        let mut copies = [[0u8; HEADER_COPY_SIZE as usize]; 2];
        pool.read(start, &mut copies[0])?;
        pool.read(start + HEADER_COPY_SIZE, &mut copies[1])?;
        let header = match choose(copies.map(|c| Header::decode(&c))) {
            Ok(header) => header,
            Err([CopyProblem::Zeroed, _] | [_, CopyProblem::Zeroed]) => {
                return Err(Error::NotFormatted { start, end })
            }
            Err([a, b]) => {
                return Err(Error::Corrupt {
                    start,
                    end,
                    detail: format!("no valid header copy (copy 0: {a}; copy 1: {b})"),
                })
            }
        };
        if header.region_len != end - start {
            return Err(Error::RegionMismatch {
                created: header.region_len,
                given: end - start,
            });
        }
        debug_assert_eq!(header.capacity_words, cap);
        let head = header.head_word;
        let mut log = Log {
            area: start + HEADER_AREA,
            cap,
            header,
            head,
            tail: head,
            next: Cursor::at(head, cap),
            entries: 0,
            stats: Stats::default(),
            state: State::Open,
            staged: Vec::new(),
            start,
            end,
            pool,
        };
        log.recover()?;
        let entries = log.entries;
        Ok((log, entries))
    }

    /// Append one entry. Durable (and a sync point of the pool) on return: one fence.
    pub fn append(&mut self, data: &[u8]) -> Result<Lsn, Error> {
        self.check_open()?;
        let words = self.words_for(data.len())?;
        self.check_free(words)?;
        let lsn = Lsn::of_word(self.tail);
        if words < SMALL_WORDS as u64 && self.next.pos + words <= self.cap {
            self.append_small(data, words as usize)?;
        } else {
            self.write_records(std::slice::from_ref(&data), words)?;
        }
        Ok(lsn)
    }

    /// Append several entries as one batch: one fence for all, and all-or-nothing across a
    /// crash (recovery keeps the whole batch or none of it). Returns their LSNs in order.
    pub fn append_many(&mut self, batch: &[&[u8]]) -> Result<Vec<Lsn>, Error> {
        self.check_open()?;
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let mut words = 0u64;
        let mut lsns = Vec::with_capacity(batch.len());
        for data in batch {
            lsns.push(Lsn::of_word(self.tail + words));
            words += self.words_for(data.len())?;
        }
        self.check_free(words)?;
        self.write_records(batch, words)?;
        Ok(lsns)
    }

    /// Iterate over the live entries, oldest first. Each entry is checked again as it is read.
    pub fn iter(&self) -> Iter<'_, P> {
        Iter {
            log: self,
            at: self.head,
            cursor: Cursor::at(self.head, self.cap),
            done: false,
        }
    }

    /// Drop every entry before `lsn`, which must be the LSN of a live entry or [`Log::tail`].
    /// Durable on return (one header write, one fence). Returns the number of entries dropped.
    pub fn truncate_front(&mut self, lsn: Lsn) -> Result<u64, Error> {
        self.check_open()?;
        let invalid = || Error::InvalidLsn {
            lsn: lsn.get(),
            head: self.head * 8,
            tail: self.tail * 8,
        };
        let target = lsn.get() / 8;
        if lsn.get() % 8 != 0 || target < self.head || target > self.tail {
            return Err(invalid());
        }
        if target == self.head {
            return Ok(0);
        }
        let dropped = if target == self.tail {
            self.entries
        } else {
            self.count_records(self.head, target).ok_or_else(invalid)?
        };
        self.move_head(target)?;
        self.entries -= dropped;
        Ok(dropped)
    }

    /// Drop every entry (one header write, one fence).
    pub fn reset(&mut self) -> Result<(), Error> {
        self.check_open()?;
        if self.head != self.tail {
            self.move_head(self.tail)?;
        }
        self.entries = 0;
        Ok(())
    }

    /// Stop using the log; later calls return [`Error::Closed`]. Appends are already durable,
    /// so closing writes nothing.
    pub fn close(&mut self) {
        self.state = State::Closed;
    }

    /// Number of live entries.
    pub fn len(&self) -> u64 {
        self.entries
    }

    /// Whether no entry is live.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Bytes of the entries area (records take their length word plus 8 bytes per 63 payload
    /// bytes or part: see [`Log::record_size`]).
    pub fn capacity(&self) -> u64 {
        self.cap * 8
    }

    /// Bytes of the entries area not held by live entries.
    pub fn free(&self) -> u64 {
        (self.cap - (self.tail - self.head)) * 8
    }

    /// Bytes of the entries area held by live entries.
    pub fn used(&self) -> u64 {
        (self.tail - self.head) * 8
    }

    /// Bytes a record of `len` payload bytes occupies in the log.
    pub fn record_size(len: usize) -> u64 {
        record_words(len) * 8
    }

    /// Largest entry this log can hold (when empty).
    pub fn entry_len_max(&self) -> u64 {
        payload_max_for(self.cap)
    }

    /// LSN of the oldest live entry (equals [`Log::tail`] when empty).
    pub fn head(&self) -> Lsn {
        Lsn::of_word(self.head)
    }

    /// LSN the next append will get.
    pub fn tail(&self) -> Lsn {
        Lsn::of_word(self.tail)
    }

    /// Counters of this handle.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The pool the log lives in.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The region (pool offsets) the log occupies.
    pub fn region(&self) -> Range<u64> {
        self.start..self.end
    }

    fn check_open(&self) -> Result<(), Error> {
        match self.state {
            State::Open => Ok(()),
            State::Closed => Err(Error::Closed),
            State::Poisoned => Err(Error::Poisoned),
        }
    }

    fn words_for(&self, len: usize) -> Result<u64, Error> {
        let words = record_words(len);
        if len as u64 > ENTRY_LEN_MAX || words > self.cap {
            return Err(Error::TooLarge {
                len: len as u64,
                max: self.entry_len_max(),
            });
        }
        Ok(words)
    }

    fn check_free(&self, words: u64) -> Result<(), Error> {
        let free = self.cap - (self.tail - self.head);
        if words > free {
            return Err(Error::Full {
                needed: words * 8,
                free: free * 8,
            });
        }
        Ok(())
    }

    /// The common case of [`Log::append`]: one record of `words` words (known to fit, fewer
    /// than [`SMALL_WORDS`]) that does not wrap, so every word carries the same torn bit.
    /// Encoded in a buffer on the stack, checksummed word by word as it is encoded (the
    /// CRC-32C instruction where the CPU has it), and written with one call.
    #[inline]
    fn append_small(&mut self, data: &[u8], words: usize) -> Result<(), Error> {
        let mut buf = [0u64; SMALL_WORDS];
        let sense = self.next.sense << 63;
        let mut k = 1;
        encode_payload(data, |word| {
            buf[k] = word;
            k += 1;
        });
        debug_assert_eq!(k, words);
        let crc = small_crc(self.tail, data.len(), &mut buf[1..words], sense);
        buf[0] = (length_word(data.len(), false, crc) | sense).to_le();
        let offset = self.area + self.next.pos * 8;
        let bytes = words_as_bytes(&buf[..words]);
        let stored = if mutant::active("log.skip_flush") {
            self.pool.write(offset, bytes)
        } else {
            mnemo_pmem::durable_site!(
                "log.append_small_stream",
                self.pool.stream_nodrain(offset, bytes),
                self.pool.write(offset, bytes)
            )
        };
        self.fence_stored(stored, &[ByteRange::new(offset, bytes.len() as u64)])?;
        let mut next = self.next;
        next.pos += words as u64 - 1;
        next.advance(self.cap);
        self.commit(words as u64, 1, next);
        Ok(())
    }

    /// Write the records of `batch` (`words` words in all, known to fit) at the tail, make
    /// them durable with one fence, and advance the tail.
    fn write_records(&mut self, batch: &[&[u8]], words: u64) -> Result<(), Error> {
        let cap = self.cap;
        let mut cursor = self.next;
        let mut at = self.tail;
        let mut staged = std::mem::take(&mut self.staged);
        staged.clear();
        for (i, data) in batch.iter().enumerate() {
            let more = i + 1 < batch.len();
            stage_record(&mut staged, cap, &mut cursor, at, data, more);
            at += record_words(data.len());
        }
        let result = self.persist_staged(&staged);
        self.staged = staged;
        result?;
        self.commit(words, batch.len() as u64, cursor);
        Ok(())
    }

    /// Copy the staged words to the tail with non-temporal stores (records are written once
    /// and read back only by recovery and iteration), then one fence: a sync point over the
    /// written ranges, named as staged.
    fn persist_staged(&mut self, staged: &[u8]) -> Result<(), Error> {
        let pos = self.next.pos;
        let words = staged.len() as u64 / 8;
        let first = words.min(self.cap - pos);
        let (a, b) = staged.split_at(first as usize * 8);
        let flush = !mutant::active("log.skip_flush");
        let stored = (|| {
            for (offset, bytes) in [(self.area + pos * 8, a), (self.area, b)] {
                if bytes.is_empty() {
                    continue;
                }
                if flush {
                    mnemo_pmem::durable_site!(
                        "log.append_stream",
                        self.pool.stream_nodrain(offset, bytes),
                        self.pool.write(offset, bytes)
                    )?;
                } else {
                    self.pool.write(offset, bytes)?;
                }
            }
            Ok(())
        })();
        let ranges = [
            ByteRange::new(self.area + pos * 8, a.len() as u64),
            ByteRange::new(self.area, b.len() as u64),
        ];
        let ranges = if b.is_empty() {
            &ranges[..1]
        } else {
            &ranges[..]
        };
        self.fence_stored(stored, ranges)
    }

    /// After the stores of an append (`stored`: whether they went through): one fence, a sync
    /// point over `ranges` (staged by the stores). A failure poisons the log.
    #[inline]
    fn fence_stored(
        &mut self,
        stored: Result<(), mnemo_pmem::Error>,
        ranges: &[ByteRange],
    ) -> Result<(), Error> {
        let result = stored.and_then(|()| {
            mnemo_pmem::durable_site!(
                "log.append_sync",
                self.pool.sync(&SyncPoint::staged(SyncKind::Data, ranges))
            )
        });
        if let Err(err) = result {
            self.state = State::Poisoned;
            return Err(err.into());
        }
        self.stats.fences += 1;
        self.stats.lines_flushed += ranges
            .iter()
            .map(|r| lines_of(r.offset, r.len))
            .sum::<u64>();
        Ok(())
    }

    fn commit(&mut self, words: u64, entries: u64, next: Cursor) {
        self.tail += words;
        self.next = next;
        if !mutant::active("log.skip_sense_flip") {
            // Pair assertion (off for the mutant, so the crash harness is what must catch it).
            debug_assert_eq!(self.next, Cursor::at(self.tail, self.cap));
        }
        self.entries += entries;
        self.stats.appends += 1;
        self.stats.entries += entries;
    }

    /// Read the record at logical word `at` (cursor at it), with at most `room` words before
    /// the end of what may be live. Its payload goes to `out`.
    fn read_record(
        &self,
        area: &Area<'_>,
        cursor: &mut Cursor,
        at: u64,
        room: u64,
        out: &mut Vec<u8>,
    ) -> Read {
        if room == 0 {
            return Read::End;
        }
        let first = area.load(cursor.pos);
        if torn_bit(first) != cursor.sense {
            return Read::End;
        }
        let head = parse_length_word(first);
        let words = record_words(head.len);
        if words > room {
            return Read::Corrupt(format!(
                "record at LSN {} claims {} bytes, more than the {} bytes left in the log",
                at * 8,
                head.len,
                room * 8
            ));
        }
        cursor.advance(self.cap);
        let mut payload = Vec::with_capacity(payload_words(head.len));
        for _ in 0..payload_words(head.len) {
            let word = area.load(cursor.pos);
            if torn_bit(word) != cursor.sense && !mutant::active("log.skip_torn_bit") {
                // Not written in this pass: the append was torn by a crash.
                return Read::End;
            }
            payload.push(word);
            cursor.advance(self.cap);
        }
        out.clear();
        if record_crc(at, head.len, head.more, &payload) != head.crc
            || !format::decode_payload(&payload, head.len, out)
        {
            return Read::Corrupt(format!(
                "record at LSN {} ({} bytes) was written completely but its checksum does not match",
                at * 8,
                head.len
            ));
        }
        Read::Record {
            words,
            more: head.more,
        }
    }

    /// Find the end of the log: scan from the head while records are complete; a batch counts
    /// only if all of its records are. Then clean the space after it.
    fn recover(&mut self) -> Result<(), Error> {
        let area = Area::new(&self.pool, self.area, self.cap)?;
        let limit = self.head + self.cap;
        let mut cursor = Cursor::at(self.head, self.cap);
        let mut at = self.head;
        let (mut tail, mut entries, mut pending) = (self.head, 0u64, 0u64);
        let mut scratch = Vec::new();
        loop {
            match self.read_record(&area, &mut cursor, at, limit - at, &mut scratch) {
                Read::Record { words, more } => {
                    at += words;
                    pending += 1;
                    if !more {
                        tail = at;
                        entries += pending;
                        pending = 0;
                    }
                }
                Read::End => break,
                Read::Corrupt(detail) => {
                    return Err(Error::Corrupt {
                        start: self.start,
                        end: self.end,
                        detail,
                    })
                }
            }
        }
        self.tail = tail;
        self.next = Cursor::at(tail, self.cap);
        self.entries = entries;
        if !mutant::active("log.skip_repair") {
            self.repair(false)?;
        }
        Ok(())
    }

    /// Restore the invariant of the free space: every word from the tail to the head (going
    /// round) carries the torn bit opposite to the one its next write will carry, so a torn
    /// append can never borrow a word left over from an earlier torn append. `strict` (create)
    /// also zeroes the data bits of every free word. One fence if anything changed.
    fn repair(&mut self, strict: bool) -> Result<u64, Error> {
        let area = Area::new(&self.pool, self.area, self.cap)?;
        let mut cursor = self.next;
        let mut fixed = 0u64;
        // The lines changed, as ranges of consecutive lines.
        let mut lines: Vec<ByteRange> = Vec::new();
        for _ in 0..self.cap - (self.tail - self.head) {
            let want = free_word(cursor.sense);
            let word = area.load(cursor.pos);
            let wrong = if strict {
                word != want
            } else {
                torn_bit(word) != torn_bit(want)
            };
            if wrong {
                area.store(cursor.pos, want);
                let line = (self.area + cursor.pos * 8) / CACHE_LINE * CACHE_LINE;
                match lines.last_mut() {
                    Some(last) if last.end() > line => {}
                    Some(last) if last.end() == line => last.len += CACHE_LINE,
                    _ => lines.push(ByteRange::new(line, CACHE_LINE)),
                }
                fixed += 1;
            }
            cursor.advance(self.cap);
        }
        // One sync point, or as many as the limit on ranges asks for (a scattered repair
        // after a torn append; the log is not open for appends until all returned).
        for part in lines.chunks(mnemo_pmem::limits::GMSYNC_RANGES_MAX) {
            mnemo_pmem::durable_site!(
                "log.repair",
                self.pool.sync(&SyncPoint::new(SyncKind::Metadata, part))
            )?;
        }
        Ok(fixed)
    }

    /// Count the records from `from` to exactly `to` (logical words), or None if `to` is not
    /// a record boundary.
    fn count_records(&self, from: u64, to: u64) -> Option<u64> {
        let area = Area::new(&self.pool, self.area, self.cap).ok()?;
        let mut at = from;
        let mut count = 0;
        while at < to {
            let word = area.load(at % self.cap);
            at += record_words(parse_length_word(word).len);
            count += 1;
        }
        (at == to).then_some(count)
    }

    fn move_head(&mut self, head: u64) -> Result<(), Error> {
        let next = Header {
            head_word: head,
            generation: self.header.generation + 1,
            ..self.header.clone()
        };
        self.put_header(next)?;
        self.head = head;
        Ok(())
    }

    /// Write `header` into its copy and make it durable (a sync point). The other copy keeps
    /// the previous generation, so a torn header write loses nothing.
    fn put_header(&mut self, header: Header) -> Result<(), Error> {
        let offset = self.start + header.slot() * HEADER_COPY_SIZE;
        self.pool.write(offset, &header.encode())?;
        // The mutant spares create's two copies, so it is truncation that must be caught.
        let range = [ByteRange::new(offset, HEADER_COPY_SIZE)];
        if mutant::active("log.head_skip_flush") && header.generation > 2 {
            // Broken: the copy is claimed staged, so nothing flushes it.
            self.pool
                .sync(&SyncPoint::staged(SyncKind::Metadata, &range))?;
        } else {
            mnemo_pmem::durable_site!(
                "log.header",
                self.pool.sync(&SyncPoint::new(SyncKind::Metadata, &range))
            )?;
        }
        self.stats.fences += 1;
        self.stats.lines_flushed += 1;
        // Pair assertion: what is now on media decodes to what was meant.
        let mut back = [0u8; HEADER_COPY_SIZE as usize];
        self.pool.read(offset, &mut back)?;
        assert_eq!(
            Header::decode(&back).as_ref(),
            Ok(&header),
            "log header did not read back"
        );
        self.header = header;
        Ok(())
    }
}

/// Iterator over live entries ([`Log::iter`]).
#[derive(Debug)]
pub struct Iter<'a, P: Deref<Target = Pool>> {
    log: &'a Log<P>,
    at: u64,
    cursor: Cursor,
    done: bool,
}

impl<P: Deref<Target = Pool>> Iterator for Iter<'_, P> {
    type Item = Result<Entry, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        let log = self.log;
        if self.done || self.at >= log.tail {
            return None;
        }
        self.done = true;
        if let Err(err) = log.check_open() {
            return Some(Err(err));
        }
        let area = match Area::new(&log.pool, log.area, log.cap) {
            Ok(area) => area,
            Err(err) => return Some(Err(err)),
        };
        let mut data = Vec::new();
        let corrupt = |detail| Error::Corrupt {
            start: log.start,
            end: log.end,
            detail,
        };
        match log.read_record(
            &area,
            &mut self.cursor,
            self.at,
            log.tail - self.at,
            &mut data,
        ) {
            Read::Record { words, .. } => {
                let lsn = Lsn::of_word(self.at);
                self.at += words;
                self.done = false;
                Some(Ok(Entry { lsn, data }))
            }
            Read::End => Some(Err(corrupt(format!(
                "live record at LSN {} is no longer complete",
                self.at * 8
            )))),
            Read::Corrupt(detail) => Some(Err(corrupt(detail))),
        }
    }
}

/// Check a region and return the capacity of its entries area in words.
fn check_region(pool: &Pool, range: &Range<u64>) -> Result<u64, Error> {
    let invalid = |detail: String| Error::InvalidRegion {
        start: range.start,
        end: range.end,
        detail,
    };
    if range.start % REGION_ALIGN != 0 {
        return Err(invalid(format!("start is not {REGION_ALIGN}-byte aligned")));
    }
    if range.start < pool.data_offset() {
        return Err(invalid(format!(
            "overlaps the pool header (data starts at {})",
            pool.data_offset()
        )));
    }
    if range.end > pool.size() || range.end < range.start {
        return Err(invalid(format!(
            "outside the pool of {} bytes",
            pool.size()
        )));
    }
    let len = range.end - range.start;
    if len < HEADER_AREA + AREA_MIN {
        return Err(invalid(format!(
            "{len} bytes; a log needs at least {}",
            HEADER_AREA + AREA_MIN
        )));
    }
    let cap = (len - HEADER_AREA) / 8;
    if cap > AREA_WORDS_MAX {
        return Err(invalid(format!("larger than {} bytes", AREA_WORDS_MAX * 8)));
    }
    Ok(cap)
}

fn ensure_backed(pool: &Pool, offset: u64, len: u64) -> Result<(), Error> {
    pool.ensure_backed(offset, len).map_err(Error::Pool)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast path's checksum (SSE4.2 or portable) is the format's `record_crc`, and it
    /// leaves the payload words little-endian with the torn bit set as asked.
    #[test]
    fn small_crc_is_the_record_crc() {
        for len in 0..=payload_max_for(SMALL_WORDS as u64 - 1) as usize {
            let data: Vec<u8> = (0..len).map(|i| (i * 131 + len) as u8).collect();
            let mut words = Vec::new();
            encode_payload(&data, |w| words.push(w));
            for (at, sense) in [(0u64, 1u64), (12_345, 0), (u64::MAX / 3, 1)] {
                let mut fast = words.clone();
                let mut portable = words.clone();
                let crc = small_crc(at, len, &mut fast, sense << 63);
                assert_eq!(crc, record_crc(at, len, false, &words), "len {len}");
                let crc = small_crc_portable(at, len, &mut portable, sense << 63);
                assert_eq!(crc, record_crc(at, len, false, &words), "len {len}");
                for ((got, other), want) in fast.iter().zip(&portable).zip(&words) {
                    assert_eq!(u64::from_le(*got), want | sense << 63);
                    assert_eq!(got, other);
                }
            }
        }
    }
}
