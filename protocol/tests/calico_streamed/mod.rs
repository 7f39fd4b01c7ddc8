//! Shared by the Calico codec's property tests and its fuzz target (which includes this file
//! by path): putting the updates a streaming read handed over back into their message, so it
//! compares with a whole read.

use typha_protocol::calico::gob::Value;
use typha_protocol::calico::messages::MessageKind;

/// Puts streamed updates back into the first `KVs` slice sent of the first `MsgKVs` the
/// top-level value holds directly (a field of it, or itself): the one the decoder streams.
pub(crate) fn put_back(top: &mut Value, updates: Vec<Value>) {
    let name = MessageKind::Kvs.registered_name();
    let direct: Vec<&mut Value> = match top {
        Value::Struct(e) => e.fields.iter_mut().map(|(_, v)| v).collect(),
        v => vec![v],
    };
    for field in direct {
        if let Value::Interface(Some(c)) = field
            && c.name[..] == *name.as_bytes()
        {
            let Value::Struct(kvs) = &mut c.value else {
                break;
            };
            let def = kvs.def.clone();
            let first = kvs.fields.iter_mut().find(|(i, v)| {
                def.get(*i).is_some_and(|f| &*f.name == "KVs") && matches!(v, Value::Slice(_))
            });
            match first {
                Some((_, Value::Slice(items))) => *items = updates,
                _ => assert!(updates.is_empty(), "updates handed over for no slice"),
            }
            return;
        }
    }
    assert!(updates.is_empty(), "updates handed over outside a MsgKVs");
}
