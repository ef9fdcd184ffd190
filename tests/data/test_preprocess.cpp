// `mtron preprocess` on small inputs (NullTokenizer: the ids are the text, so the expected
// output is known): output byte-identical to the Python reference writer for the same documents,
// every input form (.jsonl, .txt, gzip, zstd, CRLF, lists, several keys), malformed lines fatal
// or skipped with their line numbers, and the command-line errors (exit status 2, one line
// naming the flag or file).
#include <gtest/gtest.h>
#include <zlib.h>
#include <zstd.h>

#include "mtron/core/error.h"
#include "mtron/data/indexed_dataset.h"
#include "mtron/data/preprocess.h"
#include "test_util.h"

namespace mtron::data {
namespace {

using testing::python_reference;
using testing::read_text;
using testing::run_command;
using testing::shell_quote;
using testing::TempDir;
using testing::write_text;

PreprocessOptions null_options(const std::string& input, const std::string& prefix) {
  PreprocessOptions o;
  o.input = input;
  o.output_prefix = prefix;
  o.tokenizer.type = "NullTokenizer";
  o.tokenizer.vocab_size = 500;
  o.append_eod = true;
  o.workers = 2;
  o.progress = ProgressStyle::kNone;
  return o;
}

// Expected output through the Python reference writer; compares both files byte for byte.
void expect_output(const std::string& prefix,
                   const nlohmann::json& documents,
                   const std::string& dtype = "uint16") {
  TempDir t;
  python_reference("write_idx",
                   {{"prefix", t / "ref"}, {"dtype", dtype}, {"documents", documents}});
  EXPECT_EQ(read_text(prefix + ".idx"), read_text(t / "ref.idx")) << prefix;
  EXPECT_EQ(read_text(prefix + ".bin"), read_text(t / "ref.bin")) << prefix;
}

TEST(Preprocess, JsonlMatchesTheReferenceByteForByte) {
  TempDir t;
  // EOD (499) is appended to non-empty documents only; an empty text is a document with no
  // sequence; a list gives one sequence per non-empty string, EOD on the last.
  write_text(t / "in.jsonl",
             "{\"text\": \"1 2 3\"}\n"
             "{\"id\": 7, \"text\": \"4\"}\n"
             "{\"text\": \"\"}\n"
             "{\"text\": [\"5 6\", \"\", \"7\"]}\n"
             "{\"text\": \"8 9\"}");  // no final newline
  const auto st = preprocess(null_options(t / "in.jsonl", t / "out"));
  EXPECT_EQ(st.documents, 5);
  EXPECT_EQ(st.empty, 1);
  EXPECT_EQ(st.tokens, 3 + 1 + 1 + 1 + 3 + 1 + 2 + 1);
  expect_output(
      t / "out_text_document",
      {{{1, 2, 3, 499}}, {{4, 499}}, nlohmann::json::array(), {{5, 6}, {7, 499}}, {{8, 9, 499}}});
}

TEST(Preprocess, WorkerCountDoesNotChangeTheOutput) {
  TempDir t;
  std::string in;
  for (int i = 0; i < 20000; ++i)
    in += "{\"text\": \"" + std::to_string(i % 400) + " " + std::to_string(i % 7) + "\"}\n";
  write_text(t / "in.jsonl", in);
  auto o = null_options(t / "in.jsonl", t / "w1");
  o.workers = 1;
  preprocess(o);
  o.workers = 3;
  o.output_prefix = t / "w3";
  preprocess(o);
  EXPECT_EQ(read_text(t / "w1_text_document.bin"), read_text(t / "w3_text_document.bin"));
  EXPECT_EQ(read_text(t / "w1_text_document.idx"), read_text(t / "w3_text_document.idx"));
  IndexedDataset ds(t / "w3_text_document");
  EXPECT_EQ(ds.num_documents(), 20000);
}

TEST(Preprocess, TextGzipZstdAndCrlfInputs) {
  TempDir t;
  const std::string jsonl = "{\"text\": \"1 2\"}\r\n{\"text\": \"3\"}\r\n";
  const nlohmann::json want = {{{1, 2, 499}}, {{3, 499}}};
  write_text(t / "crlf.jsonl", jsonl);
  preprocess(null_options(t / "crlf.jsonl", t / "crlf"));
  expect_output(t / "crlf_text_document", want);

  write_text(t / "in.txt", "1 2\n3\n");
  preprocess(null_options(t / "in.txt", t / "txt"));
  expect_output(t / "txt_text_document", want);

  gzFile g = gzopen((t / "in.jsonl.gz").c_str(), "wb");
  gzwrite(g, jsonl.data(), unsigned(jsonl.size()));
  gzclose(g);
  preprocess(null_options(t / "in.jsonl.gz", t / "gz"));
  expect_output(t / "gz_text_document", want);

  std::string z(ZSTD_compressBound(jsonl.size()), '\0');
  z.resize(ZSTD_compress(z.data(), z.size(), jsonl.data(), jsonl.size(), 3));
  write_text(t / "in.jsonl.zst", z);
  preprocess(null_options(t / "in.jsonl.zst", t / "zst"));
  expect_output(t / "zst_text_document", want);

  write_text(t / "trunc.jsonl.zst", z.substr(0, z.size() - 3));
  try {
    preprocess(null_options(t / "trunc.jsonl.zst", t / "bad"));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("trunc.jsonl.zst"), std::string::npos) << e.what();
  }
}

TEST(Preprocess, SeveralJsonKeysWriteOneDatasetEach) {
  TempDir t;
  write_text(t / "in.jsonl", "{\"a\": \"1\", \"b\": \"2 3\"}\n{\"a\": \"4 5\", \"b\": \"\"}\n");
  auto o = null_options(t / "in.jsonl", t / "k");
  o.json_keys = {"a", "b"};
  o.append_eod = false;
  preprocess(o);
  expect_output(t / "k_a_document", {{{1}}, {{4, 5}}});
  expect_output(t / "k_b_document", {{{2, 3}}, nlohmann::json::array()});
}

TEST(Preprocess, MalformedLinesAreFatalWithTheirLineNumber) {
  TempDir t;
  write_text(t / "in.jsonl",
             "{\"text\": \"1\"}\n{\"text\": \"2\"\n{\"text\": 3}\n\n{\"txt\": "
             "\"4\"}\n[1]\n{\"text\": \"5 x\"}\n{\"text\": \"6\"}\n");
  try {
    preprocess(null_options(t / "in.jsonl", t / "out"));
    ADD_FAILURE() << "malformed input accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(t / "in.jsonl" + ":2: invalid JSON"), std::string::npos) << m;
    EXPECT_NE(m.find("--skip-malformed-lines"), std::string::npos) << m;
  }
  EXPECT_FALSE(std::filesystem::exists(t / "out_text_document.idx"));  // nothing half-written
  EXPECT_FALSE(std::filesystem::exists(t / "out_text_document.bin"));

  auto o = null_options(t / "in.jsonl", t / "skip");
  o.skip_malformed = true;
  const auto st = preprocess(o);
  EXPECT_EQ(
      st.skipped,
      6);  // lines 2 (JSON), 3 (not a string), 4 (empty), 5 (no key), 6 (not an object), 7 (token)
  EXPECT_EQ(st.documents, 2);
  expect_output(t / "skip_text_document", {{{1, 499}}, {{6, 499}}});
}

TEST(Preprocess, InvalidUtf8InTextIsMalformed) {
  TempDir t;
  write_text(t / "in.txt", "1\n2 \xFF\n3\n");
  try {
    preprocess(null_options(t / "in.txt", t / "out"));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("in.txt:2: invalid UTF-8 at byte 2"), std::string::npos)
        << e.what();
  }
}

// --- the command line
// -------------------------------------------------------------------------------

struct Cli {
  int status;
  std::string out;
};
Cli mtron(const std::string& args) {
  const auto r = run_command(std::string(MTRON_BINARY) + " preprocess " + args + " 2>&1");
  return {r.status, r.out};
}

TEST(PreprocessCli, ErrorsExitWithStatus2AndNameTheFlagOrFile) {
  TempDir t;
  write_text(t / "in.jsonl", "{\"text\": \"1 2\"}\n");
  const std::string base = "--output-prefix " + shell_quote(t / "o") + " --workers 1 ";
  const std::string null_tok = "--tokenizer-type NullTokenizer --vocab-size 10 ";
  const std::string in = "--input " + shell_quote(t / "in.jsonl") + " ";

  Cli c = mtron(base + null_tok + "--input " + shell_quote(t / "missing.jsonl"));
  EXPECT_EQ(c.status, 2);
  EXPECT_NE(c.out.find(str("--input ", t / "missing.jsonl", ": no such file")), std::string::npos)
      << c.out;

  c = mtron(base + in + "--tokenizer-type Nope");
  EXPECT_EQ(c.status, 2);
  EXPECT_NE(c.out.find("--tokenizer-type 'Nope' is unknown"), std::string::npos) << c.out;

  c = mtron(base + in + null_tok + "--json-keys body");
  EXPECT_EQ(c.status, 2);
  EXPECT_NE(c.out.find(":1: no key \"body\" (--json-keys)"), std::string::npos) << c.out;

  c = mtron(base + in + "--tokenizer-type GPT2BPETokenizer --vocab-file " +
            shell_quote(t / "v.json") + " --merge-file " + shell_quote(t / "m.txt"));
  EXPECT_EQ(c.status, 2);
  EXPECT_NE(c.out.find(str("--vocab-file ", t / "v.json", ": no such file")), std::string::npos)
      << c.out;

  c = mtron(base + in + null_tok + "--no-such-flag");
  EXPECT_EQ(c.status, 2);
  EXPECT_NE(c.out.find("--no-such-flag"), std::string::npos) << c.out;

  c = mtron(base + in + null_tok + "--split-sentences");
  EXPECT_EQ(c.status, 2);
  EXPECT_NE(c.out.find("--split-sentences is not supported"), std::string::npos) << c.out;

  c = mtron(base + in + null_tok + "--partitions 4");
  EXPECT_EQ(c.status, 2);
  EXPECT_NE(c.out.find("--partitions 4 is not supported"), std::string::npos) << c.out;

  c = mtron(base + null_tok);
  EXPECT_EQ(c.status, 2);
  EXPECT_NE(c.out.find("--input"), std::string::npos) << c.out;

  c = mtron(base + in + null_tok + "--append-eod --progress lines");
  EXPECT_EQ(c.status, 0) << c.out;
  EXPECT_NE(c.out.find("done in"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("1 documents (0 skipped, 0 empty), 3 tokens"), std::string::npos) << c.out;
  IndexedDataset ds(t / "o_text_document");
  EXPECT_EQ(ds.num_tokens(), 3);

  // The terminal progress bar (forced here: stderr is a pipe): percent, rate, ETA, then cleared.
  c = mtron(base + in + null_tok + "--progress bar");
  EXPECT_EQ(c.status, 0) << c.out;
  EXPECT_NE(c.out.find("\r\033[Kpreprocess ["), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("docs/s"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("ETA"), std::string::npos) << c.out;

  c = mtron("--help");
  EXPECT_EQ(c.status, 0);
  EXPECT_NE(c.out.find("--tokenizer-type"), std::string::npos);
}

}  // namespace
}  // namespace mtron::data
