//! The named model sizes, as the usual guides have them, on the chapter's input (256 features)
//! and classes (10). The model itself, its layout and its step are the `mlp` crate's.

use serde::{Deserialize, Serialize};

use mlp::{Arch, CLASSES, INPUT};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    Small,
    Medium,
    Large,
}

impl Preset {
    pub const ALL: [Preset; 3] = [Preset::Small, Preset::Medium, Preset::Large];

    pub fn name(self) -> &'static str {
        match self {
            Preset::Small => "small",
            Preset::Medium => "medium",
            Preset::Large => "large",
        }
    }

    pub fn by_name(name: &str) -> Option<Preset> {
        Preset::ALL.into_iter().find(|p| p.name() == name)
    }

    pub fn arch(self) -> Arch {
        let (depth, hidden) = match self {
            Preset::Small => (3, 16),
            Preset::Medium => (6, 64),
            Preset::Large => (12, 128),
        };
        Arch {
            input: INPUT,
            hidden,
            depth,
            classes: CLASSES,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_match_the_issue() {
        assert_eq!(Preset::Small.arch().depth, 3);
        assert_eq!(Preset::Small.arch().hidden, 16);
        assert_eq!(Preset::Medium.arch().hidden, 64);
        assert_eq!(Preset::Large.arch().depth, 12);
        assert_eq!(Preset::by_name("large"), Some(Preset::Large));
        assert_eq!(Preset::by_name("huge"), None);
    }
}
