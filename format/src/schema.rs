//! The macro that turns the record table (`record.rs`) into types and code.
//!
//! One `records!` invocation lists every record kind once: its code, its
//! name, its documentation, and its fields with their encodings (types of
//! `field.rs`). From it come:
//!
//! - [`Record`](crate::Record): owned records, as the reader returns them;
//! - [`RecordRef`](crate::RecordRef): the same with borrowed strings and
//!   slices, which a writer encodes without allocating;
//! - [`Event`](crate::Event): the records of the `events` section as a
//!   fixed-size `Copy` value, which the allocator's ring carries (one named
//!   field per value, nothing overloaded);
//! - [`Kind`](crate::Kind): codes, names, docs and field lists (from which
//!   `docs/FORMAT.md`'s record table is generated and checked);
//! - encoding and decoding of record bodies.
//!
//! A `macro_rules!` table rather than a build script: it keeps the table in
//! plain Rust next to the code, needs no generated files, and the compiler
//! checks every field's encoding type. Adding a record is one entry here.

/// Expands the record table; see the module docs.
macro_rules! records {
    (
        events {
            $(
                $(#[doc = $edoc:literal])*
                $ecode:literal $ekind:ident $ename:literal {
                    $( $(#[doc = $efdoc:literal])* $efield:ident : $eenc:ident ),* $(,)?
                }
            )*
        }
        records {
            $(
                $(#[doc = $rdoc:literal])*
                $rcode:literal $rkind:ident $rname:literal {
                    $( $(#[doc = $rfdoc:literal])* $rfield:ident : $renc:ident ),* $(,)?
                }
            )*
        }
    ) => {
        /// One record of a heaptag log (owned; what the reader returns).
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum Record {
            $(
                $(#[doc = $edoc])*
                $ekind { $( $(#[doc = $efdoc])* $efield: <$eenc as Field>::Owned, )* },
            )*
            $(
                $(#[doc = $rdoc])*
                $rkind { $( $(#[doc = $rfdoc])* $rfield: <$renc as Field>::Owned, )* },
            )*
        }

        /// A record with borrowed strings and slices: what a writer encodes
        /// without allocating. Fields as in [`Record`].
        #[derive(Clone, Copy, Debug)]
        #[allow(missing_docs)]
        pub enum RecordRef<'a> {
            $(
                $(#[doc = $edoc])*
                $ekind { $( $efield: <$eenc as Field>::Ref<'a>, )* },
            )*
            $(
                $(#[doc = $rdoc])*
                $rkind { $( $rfield: <$renc as Field>::Ref<'a>, )* },
            )*
        }

        /// The allocator events of the table as one fixed-size `Copy` value
        /// (what the allocator's ring carries). Fields as in [`Record`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[allow(missing_docs)]
        pub enum Event {
            $(
                $(#[doc = $edoc])*
                $ekind { $( $efield: <$eenc as Field>::Owned, )* },
            )*
        }

        /// The kind of a record: its code in the log and its name.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum Kind {
            $( $(#[doc = $edoc])* $ekind = $ecode, )*
            $( $(#[doc = $rdoc])* $rkind = $rcode, )*
        }

        impl Kind {
            /// Every kind, in table order.
            pub const ALL: &'static [Kind] = &[ $( Kind::$ekind, )* $( Kind::$rkind, )* ];

            /// The code written in the log.
            #[inline]
            pub fn code(self) -> u8 {
                self as u8
            }

            /// The kind's name (`snake_case`), as `heaptag dump` and
            /// `docs/FORMAT.md` show it.
            #[inline]
            pub fn name(self) -> &'static str {
                match self {
                    $( Kind::$ekind => $ename, )*
                    $( Kind::$rkind => $rname, )*
                }
            }

            /// The kind's documentation, one line per doc line.
            pub fn doc(self) -> &'static str {
                match self {
                    $( Kind::$ekind => concat!($($edoc, "\n",)*), )*
                    $( Kind::$rkind => concat!($($rdoc, "\n",)*), )*
                }
            }

            /// True for kinds the allocator's ring carries as an [`Event`].
            #[inline]
            pub fn is_ring_event(self) -> bool {
                match self {
                    $( Kind::$ekind => true, )*
                    _ => false,
                }
            }

            /// The kind's fields, in encoding order.
            pub fn fields(self) -> &'static [FieldDoc] {
                match self {
                    $( Kind::$ekind => &[ $( FieldDoc {
                        name: stringify!($efield),
                        encoding: <$eenc as Field>::ENCODING,
                        doc: concat!($($efdoc, "\n",)*),
                    }, )* ], )*
                    $( Kind::$rkind => &[ $( FieldDoc {
                        name: stringify!($rfield),
                        encoding: <$renc as Field>::ENCODING,
                        doc: concat!($($rfdoc, "\n",)*),
                    }, )* ], )*
                }
            }
        }

        impl Record {
            /// The record's kind.
            #[inline]
            pub fn kind(&self) -> Kind {
                match self {
                    $( Record::$ekind { .. } => Kind::$ekind, )*
                    $( Record::$rkind { .. } => Kind::$rkind, )*
                }
            }

            /// The borrowed form of this record.
            #[inline]
            pub fn borrowed(&self) -> RecordRef<'_> {
                match self {
                    $( Record::$ekind { $($efield),* } =>
                        RecordRef::$ekind { $( $efield: <$eenc as Field>::borrow($efield), )* }, )*
                    $( Record::$rkind { $($rfield),* } =>
                        RecordRef::$rkind { $( $rfield: <$renc as Field>::borrow($rfield), )* }, )*
                }
            }

            /// Reads the body of a record of kind `code` from `c`; `None`
            /// for a code this version does not know.
            #[inline(always)]
            pub(crate) fn decode_body(code: u8, d: &mut Deltas, c: &mut Cursor<'_>) -> Result<Option<Record>, DecodeError> {
                // Struct expressions evaluate their fields in the order
                // written, which is the table's (the encoding) order.
                Ok(Some(match code {
                    $( $ecode => Record::$ekind { $( $efield: <$eenc as Field>::get(d, c)?, )* }, )*
                    $( $rcode => Record::$rkind { $( $rfield: <$renc as Field>::get(d, c)?, )* }, )*
                    _ => return Ok(None),
                }))
            }

            /// As [`decode_body`](Record::decode_body), handing the record
            /// to `f` where it was built instead of returning it: moving a
            /// freshly decoded record (into an `Option`, out of a `Result`)
            /// copies it with wide loads over the narrow stores that just
            /// wrote it, a store-forwarding stall per record.
            #[inline(always)]
            pub(crate) fn decode_body_with<T>(
                code: u8,
                d: &mut Deltas,
                c: &mut Cursor<'_>,
                f: impl FnOnce(&mut Record) -> T,
            ) -> Result<Option<T>, DecodeError> {
                let mut r = match code {
                    $( $ecode => Record::$ekind { $( $efield: <$eenc as Field>::get(d, c)?, )* }, )*
                    $( $rcode => Record::$rkind { $( $rfield: <$renc as Field>::get(d, c)?, )* }, )*
                    _ => return Ok(None),
                };
                let out = f(&mut r);
                if r.kind().is_ring_event() {
                    // An allocator event owns nothing (its fields are
                    // `Event`'s, which is `Copy`): no drop glue to call
                    // out of line for each record.
                    std::mem::forget(r);
                }
                Ok(Some(out))
            }
        }

        impl RecordRef<'_> {
            /// The record's kind.
            #[inline]
            pub fn kind(&self) -> Kind {
                match self {
                    $( RecordRef::$ekind { .. } => Kind::$ekind, )*
                    $( RecordRef::$rkind { .. } => Kind::$rkind, )*
                }
            }

            /// An owned copy.
            pub fn to_owned(&self) -> Record {
                match *self {
                    $( RecordRef::$ekind { $($efield),* } =>
                        Record::$ekind { $( $efield: <$eenc as Field>::own($efield), )* }, )*
                    $( RecordRef::$rkind { $($rfield),* } =>
                        Record::$rkind { $( $rfield: <$renc as Field>::own($rfield), )* }, )*
                }
            }

            /// Appends the record's body (its fields, no kind or length).
            #[inline]
            pub(crate) fn encode_body(&self, d: &mut Deltas, out: &mut impl Sink) {
                match *self {
                    $( RecordRef::$ekind { $($efield),* } => { $( <$eenc as Field>::put(d, $efield, out); )* } )*
                    $( RecordRef::$rkind { $($rfield),* } => { $( <$renc as Field>::put(d, $rfield, out); )* } )*
                }
            }
        }

        impl Event {
            /// Appends the event's body (its fields, no kind or length):
            /// [`RecordRef::encode_body`] for the ring kinds only, small
            /// enough to inline into the writer's loop.
            #[inline(always)]
            pub(crate) fn encode_body(&self, d: &mut Deltas, out: &mut impl Sink) {
                match *self {
                    $( Event::$ekind { $($efield),* } => { $( <$eenc as Field>::put(d, $efield, out); )* } )*
                }
            }

            /// The event's kind.
            #[inline]
            pub fn kind(&self) -> Kind {
                match self {
                    $( Event::$ekind { .. } => Kind::$ekind, )*
                }
            }

            /// The event as a record to encode.
            #[inline]
            pub fn borrowed(&self) -> RecordRef<'_> {
                match self {
                    $( Event::$ekind { $($efield),* } =>
                        RecordRef::$ekind { $( $efield: <$eenc as Field>::borrow($efield), )* }, )*
                }
            }
        }

        impl From<Event> for Record {
            fn from(e: Event) -> Record {
                e.borrowed().to_owned()
            }
        }
    };
}

pub(crate) use records;
