//! Values by name in the order they came: a trial's axis values as the user listed the axes, a
//! program's metrics as it first reported them. Written as a JSON object, read back in the
//! object's own order, so tables and files show them as the user gave them.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Named<V>(pub Vec<(String, V)>);

impl<V> Default for Named<V> {
    fn default() -> Self {
        Named(Vec::new())
    }
}

impl<V> Named<V> {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn get(&self, name: &str) -> Option<&V> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// Set `name` to `value`: in its place where it is already there, else at the end.
    pub fn set(&mut self, name: &str, value: V) {
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = value,
            None => self.0.push((name.to_string(), value)),
        }
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(n, _)| n.as_str())
    }

    pub fn iter(&self) -> impl Iterator<Item = &(String, V)> {
        self.0.iter()
    }
}

impl<V: Serialize> Serialize for Named<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Named<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct InOrder<V>(PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for InOrder<V> {
            type Value = Named<V>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of named values")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Named<V>, A::Error> {
                let mut out = Named::default();
                while let Some((k, v)) = map.next_entry::<String, V>()? {
                    out.set(&k, v);
                }
                Ok(out)
            }
        }
        d.deserialize_map(InOrder(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_order_given_is_kept_through_json() {
        let mut n: Named<String> = Named::default();
        n.set("lr", "0.1".into());
        n.set("depth", "18".into());
        n.set("lr", "0.01".into());
        let text = serde_json::to_string(&n).unwrap();
        assert_eq!(text, r#"{"lr":"0.01","depth":"18"}"#);
        let back: Named<String> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, n);
        assert_eq!(back.names().collect::<Vec<_>>(), ["lr", "depth"]);
        assert_eq!(back.get("depth").map(String::as_str), Some("18"));
        let missing: Result<Named<f64>, _> = serde_json::from_str("[1]");
        assert!(missing.is_err());
    }
}
