/// A code-point enum with an `Unknown(raw)` variant and lossless conversions both
/// ways (smoltcp's `enum_with_unknown!`, written anew). Each known variant also has
/// a spec name via `name()`.
macro_rules! enum_with_unknown {
    (
        $(#[$m:meta])*
        pub enum $name:ident($ty:ty) {
            $( $(#[$vm:meta])* $var:ident = $val:expr => $nm:expr ),+ $(,)?
        }
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vm])* $var, )+
            /// A value this implementation does not name; kept as is.
            Unknown($ty),
        }
        impl ::core::convert::From<$ty> for $name {
            fn from(v: $ty) -> Self {
                match v {
                    $( x if x == $val => $name::$var, )+
                    other => $name::Unknown(other),
                }
            }
        }
        impl ::core::convert::From<$name> for $ty {
            fn from(v: $name) -> $ty {
                match v {
                    $( $name::$var => $val, )+
                    $name::Unknown(other) => other,
                }
            }
        }
        impl $name {
            /// Every named variant (for tables and tests).
            pub const ALL: &'static [$name] = &[$($name::$var),+];
            /// The name used by the specification (or "Unknown").
            pub fn name(self) -> &'static str {
                match self {
                    $( $name::$var => $nm, )+
                    $name::Unknown(_) => "Unknown",
                }
            }
            /// The raw value.
            pub fn raw(self) -> $ty { <$ty>::from(self) }
        }
        impl ::core::fmt::Display for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                match self {
                    $name::Unknown(v) => write!(f, "Unknown({:#x})", v),
                    other => f.write_str(other.name()),
                }
            }
        }
    };
}

/// Little-endian getter/setter pairs over `self.bytes` at fixed offsets.
macro_rules! le_fields {
    ($( $(#[$m:meta])* $get:ident, $set:ident : $ty:ident @ $off:expr; )*) => {
        $(
            $(#[$m])*
            #[inline]
            pub fn $get(&self) -> $ty {
                let mut a = [0u8; ::core::mem::size_of::<$ty>()];
                a.copy_from_slice(&self.bytes[$off..$off + ::core::mem::size_of::<$ty>()]);
                <$ty>::from_le_bytes(a)
            }
            #[inline]
            pub fn $set(&mut self, v: $ty) {
                self.bytes[$off..$off + ::core::mem::size_of::<$ty>()].copy_from_slice(&v.to_le_bytes());
            }
        )*
    };
}
