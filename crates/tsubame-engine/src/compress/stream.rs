//! Compressing a streamed body as it streams: each batch of chunks the
//! connection takes from the app goes through one encoder and is flushed
//! at the batch's end, so what the app wrote reaches the client at once
//! (an SSE event, a progress line) instead of waiting in the encoder for
//! more. The end of the body finishes the encoding (the gzip trailer, the
//! last brotli block).

use crate::dispatch::stream_channel::StreamMsg;
use crate::files::encoding::Coding;
use bytes::Bytes;
use std::io::Write;

/// Batches at least this large are compressed on the blocking pool; smaller
/// ones (an event, a line) cost less than the hand-off and run in place.
const OFFLOAD: usize = 16 * 1024;

enum Encoder {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Zstd(Box<zstd::stream::write::Encoder<'static, Vec<u8>>>),
    Br(Box<brotli::CompressorWriter<Vec<u8>>>),
}

impl Encoder {
    fn new(coding: Coding) -> std::io::Result<Encoder> {
        Ok(match coding {
            Coding::Gzip => Encoder::Gzip(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6))),
            Coding::Zstd => Encoder::Zstd(Box::new(zstd::stream::write::Encoder::new(
                Vec::new(),
                super::ZSTD_LEVEL,
            )?)),
            Coding::Br => Encoder::Br(Box::new(brotli::CompressorWriter::new(Vec::new(), 16 * 1024, 5, 22))),
        })
    }

    /// Encodes `input`, then flushes (or finishes, when `last`) so every
    /// byte given so far can be decoded from the output. The encoder comes
    /// back for the next batch unless this one was the last.
    fn run(mut self, input: &[Bytes], last: bool) -> (Option<Encoder>, std::io::Result<Vec<u8>>) {
        if let Err(e) = self.write(input) {
            return (None, Err(e));
        }
        if last {
            return (None, self.finish());
        }
        let flushed = match &mut self {
            Encoder::Gzip(gz) => gz.flush().map(|()| std::mem::take(gz.get_mut())),
            Encoder::Zstd(zs) => zs.flush().map(|()| std::mem::take(zs.get_mut())),
            Encoder::Br(br) => br.flush().map(|()| std::mem::take(br.get_mut())),
        };
        (Some(self), flushed)
    }

    fn write(&mut self, input: &[Bytes]) -> std::io::Result<()> {
        let writer: &mut dyn Write = match self {
            Encoder::Gzip(gz) => gz,
            Encoder::Zstd(zs) => zs.as_mut(),
            Encoder::Br(br) => br.as_mut(),
        };
        input.iter().try_for_each(|piece| writer.write_all(piece))
    }

    fn finish(self) -> std::io::Result<Vec<u8>> {
        match self {
            Encoder::Gzip(gz) => gz.finish(),
            Encoder::Zstd(zs) => zs.finish(),
            // into_inner writes the last block before giving the Vec back.
            Encoder::Br(br) => Ok(br.into_inner()),
        }
    }
}

/// The encoder of one streamed response.
pub(crate) struct StreamEncoder {
    // None only while a batch is being encoded on the blocking pool, or
    // after a failure.
    encoder: Option<Encoder>,
}

impl std::fmt::Debug for StreamEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StreamEncoder")
    }
}

/// The encoder failed, or its blocking task was lost: the body cannot be
/// finished and the response is cut short.
#[derive(Debug)]
pub(crate) struct EncodeFailed;

impl StreamEncoder {
    pub(crate) fn new(coding: Coding) -> StreamEncoder {
        StreamEncoder {
            encoder: Encoder::new(coding).ok(),
        }
    }

    /// Replaces the chunks in `batch` with their encoding: one `Data` with
    /// everything encoded so far flushed out (none if the batch had no
    /// data), then `End` if the batch ended the body.
    pub(crate) async fn encode(&mut self, batch: &mut Vec<StreamMsg>) -> Result<(), EncodeFailed> {
        let mut input = Vec::with_capacity(batch.len());
        let mut ended = false;
        for msg in batch.drain(..) {
            match msg {
                StreamMsg::Data(data) if !data.is_empty() => input.push(data),
                StreamMsg::Data(_) => {}
                StreamMsg::End => {
                    ended = true;
                    break;
                }
            }
        }
        if input.is_empty() && !ended {
            return Ok(());
        }
        let encoder = self.encoder.take().ok_or(EncodeFailed)?;
        let size: usize = input.iter().map(Bytes::len).sum();
        let (encoder, output) = if size >= OFFLOAD {
            tokio::task::spawn_blocking(move || encoder.run(&input, ended))
                .await
                .map_err(|_| EncodeFailed)?
        } else {
            encoder.run(&input, ended)
        };
        self.encoder = encoder;
        let output = output.map_err(|_| EncodeFailed)?;
        if !output.is_empty() {
            batch.push(StreamMsg::Data(output.into()));
        }
        if ended {
            batch.push(StreamMsg::End);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn data(batch: &[StreamMsg]) -> Vec<u8> {
        let mut out = Vec::new();
        for msg in batch {
            if let StreamMsg::Data(d) = msg {
                out.extend_from_slice(d);
            }
        }
        out
    }

    fn gunzip_prefix(bytes: &[u8]) -> Vec<u8> {
        // A flushed but unfinished gzip stream: read what decodes, ignore
        // the missing trailer.
        let mut out = Vec::new();
        let mut decoder = flate2::read::GzDecoder::new(bytes);
        let mut buf = [0u8; 4096];
        while let Ok(n) = decoder.read(&mut buf) {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        out
    }

    fn batches(coding: Coding, batches: &[&[&[u8]]]) -> Vec<Vec<u8>> {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let mut encoder = StreamEncoder::new(coding);
        let mut wire = Vec::new();
        for (i, pieces) in batches.iter().enumerate() {
            let mut batch: Vec<StreamMsg> = pieces
                .iter()
                .map(|p| StreamMsg::Data(Bytes::copy_from_slice(p)))
                .collect();
            let last = i + 1 == batches.len();
            if last {
                batch.push(StreamMsg::End);
            }
            runtime.block_on(encoder.encode(&mut batch)).unwrap();
            assert_eq!(matches!(batch.last(), Some(StreamMsg::End)), last);
            wire.push(data(&batch));
        }
        wire
    }

    #[test]
    fn zstd_flushes_each_batch_and_finishes_at_the_end() {
        let events: [&[&[u8]]; 3] = [&[b"data: one\n\n"], &[b"data: two\n\n", b"data: three\n\n"], &[]];
        let wire = batches(Coding::Zstd, &events);
        // A flushed zstd frame decodes up to the flush without the frame's end.
        let mut first = Vec::new();
        let mut decoder = zstd::stream::read::Decoder::new(&wire[0][..]).unwrap();
        let mut buf = [0u8; 64];
        while let Ok(n) = decoder.read(&mut buf) {
            if n == 0 {
                break;
            }
            first.extend_from_slice(&buf[..n]);
        }
        assert_eq!(first, b"data: one\n\n");
        let whole = wire.concat();
        assert_eq!(
            zstd::stream::decode_all(&whole[..]).unwrap(),
            b"data: one\n\ndata: two\n\ndata: three\n\n"
        );
    }

    #[test]
    fn gzip_flushes_each_batch_and_finishes_at_the_end() {
        let events: [&[&[u8]]; 3] = [&[b"data: one\n\n"], &[b"data: two\n\n", b"data: three\n\n"], &[]];
        let wire = batches(Coding::Gzip, &events);
        // After the first batch alone the client can already read event one.
        assert_eq!(gunzip_prefix(&wire[0]), b"data: one\n\n");
        let whole = wire.concat();
        let mut plain = Vec::new();
        flate2::read::GzDecoder::new(&whole[..])
            .read_to_end(&mut plain)
            .unwrap();
        assert_eq!(plain, b"data: one\n\ndata: two\n\ndata: three\n\n");
    }

    #[test]
    fn brotli_round_trips_large_batches_through_the_blocking_pool() {
        let big = "brotli streamed body line\n".repeat(2000).into_bytes();
        let pieces: [&[&[u8]]; 2] = [&[&big[..20_000], &big[20_000..]], &[b"tail"]];
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let mut encoder = StreamEncoder::new(Coding::Br);
        let mut wire = Vec::new();
        for (i, pieces) in pieces.iter().enumerate() {
            let mut batch: Vec<StreamMsg> = pieces
                .iter()
                .map(|p| StreamMsg::Data(Bytes::copy_from_slice(p)))
                .collect();
            if i == 1 {
                batch.push(StreamMsg::End);
            }
            runtime.block_on(encoder.encode(&mut batch)).unwrap();
            wire.extend_from_slice(&data(&batch));
        }
        let mut plain = Vec::new();
        brotli::Decompressor::new(&wire[..], 4096)
            .read_to_end(&mut plain)
            .unwrap();
        let mut expected = big.clone();
        expected.extend_from_slice(b"tail");
        assert_eq!(plain, expected);
        assert!(wire.len() < expected.len() / 10, "{}", wire.len());
    }

    #[test]
    fn a_batch_without_data_is_left_empty() {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let mut encoder = StreamEncoder::new(Coding::Gzip);
        let mut batch = vec![StreamMsg::Data(Bytes::new())];
        runtime.block_on(encoder.encode(&mut batch)).unwrap();
        assert!(batch.is_empty());
    }
}
