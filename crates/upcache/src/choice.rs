//! Closed sets of named choices (index kind, layout, policy, ...): one macro writes each
//! enum's `ALL`, `name` and `FromStr`, so that configs, the CLI and the C ABI spell a choice
//! the same way and an unknown name gets an error that lists the valid ones.
//!
//! A leaf: every layer that owns a choice uses it, and it uses only `error`.

use crate::error::{Error, ErrorKind, Result};

/// Parses the name of one of `all`; the error lists every valid name.
pub(crate) fn parse<T: Copy>(s: &str, what: &str, all: &[T], name: impl Fn(T) -> &'static str) -> Result<T> {
    all.iter().copied().find(|&c| name(c) == s).ok_or_else(|| {
        let names: Vec<&str> = all.iter().map(|&c| name(c)).collect();
        let (last, rest) = names.split_last().expect("a closed set of choices is never empty");
        let expected =
            if rest.is_empty() { last.to_string() } else { format!("{} or {last}", rest.join(", ")) };
        Error::new(ErrorKind::InvalidConfig, format!("unknown {what} {s:?}: expected {expected}"))
    })
}

/// Defines a choice enum: its variants with their names (`Variant = "name"`), `ALL` in the
/// order listed, `name()` and `FromStr`, whose error calls the set by the quoted noun. Mark
/// the default variant `#[default]`.
macro_rules! choice {
    (
        $(#[$meta:meta])*
        $vis:vis enum $kind:ident ($what:literal) {
            $( $(#[$vmeta:meta])* $variant:ident = $name:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        $vis enum $kind {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $kind {
            /// Every choice, in the order listed.
            pub const ALL: [$kind; [$(stringify!($variant)),+].len()] = [$($kind::$variant),+];

            /// The name used in configs and on the command line.
            pub fn name(self) -> &'static str {
                match self {
                    $( $kind::$variant => $name, )+
                }
            }
        }

        impl std::str::FromStr for $kind {
            type Err = $crate::error::Error;

            fn from_str(s: &str) -> $crate::error::Result<Self> {
                $crate::choice::parse(s, $what, &$kind::ALL, $kind::name)
            }
        }
    };
}

pub(crate) use choice;

#[cfg(test)]
mod tests {
    choice! {
        /// A test set.
        enum Fruit("fruit") {
            #[default]
            Apple = "apple",
            Pear = "pear",
            Plum = "plum",
        }
    }

    #[test]
    fn names_round_trip_and_unknown_names_list_the_choices() {
        assert_eq!(Fruit::ALL, [Fruit::Apple, Fruit::Pear, Fruit::Plum]);
        assert_eq!(Fruit::default(), Fruit::Apple);
        for f in Fruit::ALL {
            assert_eq!(f.name().parse::<Fruit>().unwrap(), f);
        }
        let e = "fig".parse::<Fruit>().unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidConfig);
        assert!(e.to_string().contains(r#"unknown fruit "fig": expected apple, pear or plum"#), "{e}");
    }
}
