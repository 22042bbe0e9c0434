//! Typed 8-byte offset pointers and the [`Persist`] bound.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Types that may be stored in a pool: plain bytes with no pointers into process memory.
///
/// Implemented for every type that is zerocopy `FromBytes + IntoBytes + Immutable +
/// KnownLayout`: integers, arrays, `#[repr(C)]` structs of those deriving the four traits,
/// and [`PPtr`]. References and raw pointers are not `FromBytes`, so a struct holding one
/// cannot be `Persist` and cannot be stored: the compiler rejects it.
///
/// ```compile_fail
/// use mnemo_heap::Persist;
/// fn needs<T: Persist>() {}
/// needs::<&'static u64>(); // a reference is not persistable
/// ```
pub trait Persist: FromBytes + IntoBytes + Immutable + KnownLayout + Sized {}

impl<T: FromBytes + IntoBytes + Immutable + KnownLayout + Sized> Persist for T {}

/// A persistent pointer: the object's offset from the start of the pool, 0 for null.
/// Eight bytes on media (little-endian), valid in every process that maps the pool.
#[derive(FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(transparent)]
pub struct PPtr<T> {
    offset: u64,
    _type: PhantomData<T>,
}

const _: () = assert!(std::mem::size_of::<PPtr<[u8; 100]>>() == 8);
#[cfg(target_endian = "big")]
compile_error!(
    "mnemo-heap stores native integers on media and supports little-endian targets only"
);

impl<T> PPtr<T> {
    /// The null pointer.
    pub const fn null() -> PPtr<T> {
        PPtr {
            offset: 0,
            _type: PhantomData,
        }
    }

    /// A pointer to the object at `offset`. Nothing is checked here; every access checks the
    /// range against the pool (a wrong offset gives an error or wrong bytes, never UB).
    pub const fn from_offset(offset: u64) -> PPtr<T> {
        PPtr {
            offset,
            _type: PhantomData,
        }
    }

    /// The offset (0 for null).
    pub const fn offset(self) -> u64 {
        self.offset
    }

    /// Whether this is the null pointer.
    pub const fn is_null(self) -> bool {
        self.offset == 0
    }

    /// The same offset, viewed as a pointer to another type.
    pub const fn cast<U>(self) -> PPtr<U> {
        PPtr::from_offset(self.offset)
    }

    /// Pointer to a field or element `bytes` past this one, typed `U`.
    pub const fn byte_add<U>(self, bytes: u64) -> PPtr<U> {
        PPtr::from_offset(self.offset + bytes)
    }
}

impl<T> Clone for PPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for PPtr<T> {}
impl<T> PartialEq for PPtr<T> {
    fn eq(&self, other: &Self) -> bool {
        self.offset == other.offset
    }
}
impl<T> Eq for PPtr<T> {}
impl<T> Hash for PPtr<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.offset.hash(state)
    }
}
impl<T> Default for PPtr<T> {
    fn default() -> Self {
        PPtr::null()
    }
}
impl<T> fmt::Debug for PPtr<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "PPtr<{}>({:#x})",
            std::any::type_name::<T>(),
            self.offset
        )
    }
}
