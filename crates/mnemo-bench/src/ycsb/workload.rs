//! `CoreWorkload`'s properties and the six core workloads as YCSB's `workloads/workloada`
//! .. `workloadf` define them.

use super::generator::{fnv_hash64, Rng};

/// How the run phase chooses keys (`requestdistribution`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distribution {
    /// Uniform over the loaded keys.
    Uniform,
    /// Scrambled zipfian (constant 0.99) over the loaded keys plus the expected inserts.
    Zipfian,
    /// Skewed towards the most recently inserted keys.
    Latest,
}

/// `CoreWorkload`'s properties (the ones the core workloads set or rely on).
#[derive(Clone, Debug, PartialEq)]
pub struct CoreWorkload {
    /// Workload name ("A" .. "F").
    pub name: &'static str,
    /// `recordcount`: records loaded.
    pub recordcount: i64,
    /// `operationcount`: operations in the run phase.
    pub operationcount: i64,
    /// `fieldcount` (10).
    pub fieldcount: usize,
    /// `fieldlength` (100 bytes; constant `fieldlengthdistribution`).
    pub fieldlength: usize,
    /// `readallfields` (true: reads fetch the whole record).
    pub readallfields: bool,
    /// `writeallfields` (false: updates write one random field).
    pub writeallfields: bool,
    /// `readproportion`.
    pub read: f64,
    /// `updateproportion`.
    pub update: f64,
    /// `insertproportion`.
    pub insert: f64,
    /// `scanproportion`.
    pub scan: f64,
    /// `readmodifywriteproportion`.
    pub read_modify_write: f64,
    /// `requestdistribution`.
    pub distribution: Distribution,
    /// `minscanlength` (1).
    pub min_scan_length: i64,
    /// `maxscanlength` (1000 by default; 100 in workload E), uniform
    /// `scanlengthdistribution`.
    pub max_scan_length: i64,
    /// `insertorder=hashed` (true): key numbers are hashed into key names.
    pub hashed_insert_order: bool,
}

impl CoreWorkload {
    /// CoreWorkload's defaults with the given counts (read 0.95, update 0.05, uniform).
    pub fn defaults(recordcount: i64, operationcount: i64) -> CoreWorkload {
        CoreWorkload {
            name: "default",
            recordcount,
            operationcount,
            fieldcount: 10,
            fieldlength: 100,
            readallfields: true,
            writeallfields: false,
            read: 0.95,
            update: 0.05,
            insert: 0.0,
            scan: 0.0,
            read_modify_write: 0.0,
            distribution: Distribution::Uniform,
            min_scan_length: 1,
            max_scan_length: 1000,
            hashed_insert_order: true,
        }
    }

    /// Core workload `letter` (a..f, either case) as in YCSB's `workloads/` files.
    pub fn core(letter: &str, recordcount: i64, operationcount: i64) -> Option<CoreWorkload> {
        let base = CoreWorkload::defaults(recordcount, operationcount);
        let w = match letter.to_ascii_lowercase().as_str() {
            // Update heavy: session store recording recent actions.
            "a" => CoreWorkload {
                name: "A",
                read: 0.5,
                update: 0.5,
                distribution: Distribution::Zipfian,
                ..base
            },
            // Read mostly: photo tagging.
            "b" => CoreWorkload {
                name: "B",
                read: 0.95,
                update: 0.05,
                distribution: Distribution::Zipfian,
                ..base
            },
            // Read only: user profile cache.
            "c" => CoreWorkload {
                name: "C",
                read: 1.0,
                update: 0.0,
                distribution: Distribution::Zipfian,
                ..base
            },
            // Read latest: user status updates.
            "d" => CoreWorkload {
                name: "D",
                read: 0.95,
                update: 0.0,
                insert: 0.05,
                distribution: Distribution::Latest,
                ..base
            },
            // Short ranges: threaded conversations.
            "e" => CoreWorkload {
                name: "E",
                read: 0.0,
                update: 0.0,
                insert: 0.05,
                scan: 0.95,
                distribution: Distribution::Zipfian,
                max_scan_length: 100,
                ..base
            },
            // Read-modify-write: user database.
            "f" => CoreWorkload {
                name: "F",
                read: 0.5,
                update: 0.0,
                read_modify_write: 0.5,
                distribution: Distribution::Zipfian,
                ..base
            },
            _ => return None,
        };
        Some(w)
    }

    /// `buildKeyName`: "user" followed by the (hashed) key number in decimal
    /// (`zeropadding=1`: no padding).
    pub fn key_name(&self, keynum: i64) -> String {
        let n = if self.hashed_insert_order {
            fnv_hash64(keynum)
        } else {
            keynum
        };
        format!("user{n}")
    }

    /// `"field" + i`.
    pub fn field_name(i: usize) -> Vec<u8> {
        format!("field{i}").into_bytes()
    }

    /// `buildValues`: every field, each `fieldlength` random bytes.
    pub fn all_values(&self, rng: &mut Rng) -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..self.fieldcount)
            .map(|i| (Self::field_name(i), self.random_value(rng)))
            .collect()
    }

    /// `buildSingleValue`: one uniformly chosen field.
    pub fn one_value(&self, rng: &mut Rng) -> Vec<(Vec<u8>, Vec<u8>)> {
        let i = (rng.next_f64() * self.fieldcount as f64) as usize;
        vec![(Self::field_name(i), self.random_value(rng))]
    }

    /// The fields a read asks for: `None` for the whole record (`readallfields=true`, as in
    /// the core workloads), else one uniformly chosen field, as CoreWorkload's
    /// `fieldchooser`.
    pub fn read_fields(&self, rng: &mut Rng) -> Option<Vec<Vec<u8>>> {
        if self.readallfields {
            None
        } else {
            let i = (rng.next_f64() * self.fieldcount as f64) as usize;
            Some(vec![Self::field_name(i)])
        }
    }

    /// The values an update or read-modify-write writes.
    pub fn update_values(&self, rng: &mut Rng) -> Vec<(Vec<u8>, Vec<u8>)> {
        if self.writeallfields {
            self.all_values(rng)
        } else {
            self.one_value(rng)
        }
    }

    /// `RandomByteIterator`: printable bytes ' ' .. '_' (six random bits each).
    pub fn random_value(&self, rng: &mut Rng) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.fieldlength);
        while out.len() < self.fieldlength {
            let bits = rng.next_u64();
            for i in 0..10 {
                if out.len() == self.fieldlength {
                    break;
                }
                out.push(b' ' + ((bits >> (6 * i)) & 63) as u8);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_match_ycsb_files() {
        let a = CoreWorkload::core("a", 1000, 1000).unwrap();
        assert_eq!(
            (a.read, a.update, a.distribution),
            (0.5, 0.5, Distribution::Zipfian)
        );
        let d = CoreWorkload::core("D", 1000, 1000).unwrap();
        assert_eq!(
            (d.read, d.insert, d.distribution),
            (0.95, 0.05, Distribution::Latest)
        );
        let e = CoreWorkload::core("e", 1000, 1000).unwrap();
        assert_eq!((e.scan, e.insert, e.max_scan_length), (0.95, 0.05, 100));
        let f = CoreWorkload::core("f", 1000, 1000).unwrap();
        assert_eq!((f.read, f.read_modify_write), (0.5, 0.5));
        for w in ["a", "b", "c", "d", "e", "f"] {
            let w = CoreWorkload::core(w, 1, 1).unwrap();
            let sum = w.read + w.update + w.insert + w.scan + w.read_modify_write;
            assert!((sum - 1.0).abs() < 1e-12);
            assert_eq!((w.fieldcount, w.fieldlength), (10, 100));
            assert!(w.readallfields && !w.writeallfields);
        }
        assert!(CoreWorkload::core("g", 1, 1).is_none());
    }

    #[test]
    fn keys_and_values_have_ycsb_shape() {
        let w = CoreWorkload::core("a", 10, 10).unwrap();
        assert_eq!(w.key_name(0), "user6284781860667377211");
        let mut rng = Rng::new(9);
        let values = w.all_values(&mut rng);
        assert_eq!(values.len(), 10);
        assert_eq!(values[3].0, b"field3");
        assert!(values
            .iter()
            .all(|(_, v)| v.len() == 100 && v.iter().all(|b| (b' '..=b'_').contains(b))));
        assert_eq!(w.update_values(&mut rng).len(), 1);
        assert_eq!(w.read_fields(&mut rng), None);
        let one = CoreWorkload {
            readallfields: false,
            ..w
        };
        let fields = one.read_fields(&mut rng).expect("one field");
        assert!(fields.len() == 1 && fields[0].starts_with(b"field"));
    }
}
