use super::*;
use crate::digest::BucketSet;
use crate::message::{Ack, Ping, Pong, Seq, SnapshotBegin, SnapshotScope};

const EPOCH: Epoch = Epoch(0xabcd);

fn pair(client: ClientOffer, server: ServerOffer) -> (Result<Session, Rejected>, Option<Accepted>) {
    let t0 = Instant::now();
    let mut c = ClientHandshake::new(client, t0);
    let mut s = ServerHandshake::new(server, t0);
    let answer = match s.handle_message(Message::ClientHello(c.hello()), t0) {
        Ok(acc) => {
            let reply = Message::ServerHello(acc.reply.clone());
            return (c.handle_message(reply, t0), Some(acc));
        }
        Err(rej) => Message::Goodbye(rej.goodbye.expect("server rejections carry a goodbye")),
    };
    (c.handle_message(answer, t0), None)
}

#[test]
fn agrees_on_highest_common_version_and_feature_intersection() {
    let mut client = ClientOffer::new("node-1");
    client.versions = vec![ProtocolVersion(1), ProtocolVersion(2), ProtocolVersion(3)];
    client.features = Features::ACK.with(Features(1 << 40));
    let mut server = ServerOffer::new(EPOCH);
    server.versions = vec![ProtocolVersion(1), ProtocolVersion(2)];
    let (session, accepted) = pair(client, server);
    let session = session.unwrap();
    assert_eq!(session.version, ProtocolVersion(2));
    assert_eq!(session.features, Features::ACK);
    assert_eq!(session.epoch, EPOCH);
    let accepted = accepted.unwrap();
    assert_eq!(accepted.session.version, ProtocolVersion(2));
    assert_eq!(accepted.hostname, "node-1");
}

#[test]
fn no_common_version_is_refused_with_a_reason_both_sides_see() {
    let mut client = ClientOffer::new("n");
    client.versions = vec![ProtocolVersion(9)];
    let (session, _) = pair(client, ServerOffer::new(EPOCH));
    let rej = session.unwrap_err();
    let RejectReason::Refused(g) = rej.reason else {
        panic!("{rej}")
    };
    assert_eq!(g.reason, GoodbyeReason::NoCommonVersion);
    assert!(
        g.message.contains("no common protocol version"),
        "{}",
        g.message
    );
}

#[test]
fn wrong_syncer_type_is_refused() {
    let mut client = ClientOffer::new("n");
    client.syncer_type = SyncerType::from_name("shiny-new-syncer");
    let (session, _) = pair(client, ServerOffer::new(EPOCH));
    let RejectReason::Refused(g) = session.unwrap_err().reason else {
        panic!()
    };
    assert_eq!(g.reason, GoodbyeReason::WrongSyncerType);
    assert!(g.message.contains("shiny-new-syncer"));
}

#[test]
fn no_hello_within_the_timeout_is_refused() {
    let t0 = Instant::now();
    let mut s = ServerHandshake::new(ServerOffer::new(EPOCH), t0);
    assert_eq!(s.handle_timeout(t0 + Duration::from_secs(9)), None);
    let rej = s.handle_timeout(t0 + Duration::from_secs(10)).unwrap();
    assert_eq!(rej.reason, RejectReason::Timeout(DEFAULT_HANDSHAKE_TIMEOUT));
    assert_eq!(rej.goodbye.unwrap().reason, GoodbyeReason::HandshakeTimeout);
    // A hello after the timeout fired is not accepted.
    let hello = ClientHandshake::new(ClientOffer::new("n"), t0).hello();
    assert!(s.handle_message(Message::ClientHello(hello), t0).is_err());
}

#[test]
fn late_hello_is_refused() {
    let t0 = Instant::now();
    let mut s = ServerHandshake::new(ServerOffer::new(EPOCH), t0);
    let hello = ClientHandshake::new(ClientOffer::new("n"), t0).hello();
    let rej = s
        .handle_message(Message::ClientHello(hello), t0 + Duration::from_secs(11))
        .unwrap_err();
    assert!(matches!(rej.reason, RejectReason::Timeout(_)));
}

#[test]
fn first_message_must_be_a_hello() {
    let t0 = Instant::now();
    let mut s = ServerHandshake::new(ServerOffer::new(EPOCH), t0);
    let rej = s
        .handle_message(
            Message::Pong(Pong {
                ping_timestamp_micros: 0,
            }),
            t0,
        )
        .unwrap_err();
    assert_eq!(
        rej.reason,
        RejectReason::UnexpectedMessage {
            expected: MessageType::ClientHello,
            got: MessageType::Pong
        }
    );
}

#[test]
fn client_rejects_answers_it_did_not_ask_for() {
    let t0 = Instant::now();
    let offer = ClientOffer {
        features: Features::NONE,
        ..ClientOffer::new("n")
    };
    let mut c = ClientHandshake::new(offer, t0);
    let bad = ServerHello {
        version: ProtocolVersion::V1,
        syncer_type: SyncerType::Felix,
        epoch: EPOCH,
        features: Features::ACK,
        compression: CompressionSet::ZSTD,
        info: String::new(),
        extensions: vec![],
    };
    let rej = c.handle_message(Message::ServerHello(bad), t0).unwrap_err();
    assert!(
        matches!(rej.reason, RejectReason::InvalidServerHello(_)),
        "{rej}"
    );
}

#[test]
fn messages_are_sent_only_when_negotiated() {
    let client = ClientOffer {
        features: Features::NONE,
        ..ClientOffer::new("old-client")
    };
    let (_, accepted) = pair(client, ServerOffer::new(EPOCH));
    let server = accepted.unwrap().session;
    let buckets = Message::SnapshotBegin(SnapshotBegin {
        seq: Seq(1),
        scope: SnapshotScope::Buckets(BucketSet::all()),
        kvs: 0,
    });
    assert!(!server.may_send(&buckets));
    assert!(server.may_send(&Message::Ping(Ping {
        timestamp_micros: 1
    })));
    assert!(
        !server.may_send(&Message::Ack(Ack { seq: Seq(1) })),
        "wrong direction"
    );
    assert!(
        !server.may_receive(MessageType::Ack),
        "client did not offer ACK"
    );
    assert!(server.may_receive(MessageType::Pong));
    assert!(!server.may_receive(MessageType::ClientHello));

    let (client, accepted) = pair(ClientOffer::new("new-client"), ServerOffer::new(EPOCH));
    let client = client.unwrap();
    assert!(client.may_send(&Message::Ack(Ack { seq: Seq(1) })));
    assert!(accepted.unwrap().session.may_send(&buckets));
    assert!(!client.may_receive(MessageType::Pong));
}

#[test]
fn a_revision_floor_travels_with_a_resume_only_and_a_malformed_one_is_ignored() {
    let resume = Resume {
        cursor: None,
        digest: None,
    };
    let with = |resume: Option<Resume>, floor: Option<u64>| ClientOffer {
        resume,
        revision_floor: floor.map(Revision),
        ..ClientOffer::new("n")
    };
    let floor_of = |offer: ClientOffer| {
        pair(offer, ServerOffer::new(EPOCH))
            .1
            .unwrap()
            .revision_floor
    };
    assert_eq!(
        floor_of(with(Some(resume.clone()), Some(4242))),
        Some(Revision(4242))
    );
    // A fresh client has nothing to be older than.
    assert_eq!(floor_of(with(None, Some(4242))), None);
    assert_eq!(floor_of(with(Some(resume.clone()), None)), None);
    // On the wire: one extension, eight bytes; a short one means nothing.
    let hello = ClientHandshake::new(with(Some(resume), Some(7)), Instant::now()).hello();
    assert_eq!(
        hello.extensions,
        vec![Extension::revision_floor(Revision(7))]
    );
    let bad = Extension {
        id: Extension::REVISION_FLOOR,
        data: vec![1, 2, 3],
    };
    assert_eq!(
        Extension::find_revision_floor(std::slice::from_ref(&bad)),
        None
    );
    assert_eq!(
        Extension::find_revision_floor(&[bad, Extension::revision_floor(Revision(9))]),
        Some(Revision(9))
    );
}
