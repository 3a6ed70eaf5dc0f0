/** @type {GraphMeta} */
export const meta = {
  name: "Publish release notes",
  slug: "publish-notes",
  version: "1.0.0",
  description:
    "Drafts release notes, checks that the draft starts with a heading, retries up to three times, and writes the accepted draft to the folder.",
};

/** @param {GraphArgs} args @param {G} g */
export default async function (args, g) {
  if (typeof args.changes !== "string") {
    throw new Error("args.changes must describe the changes");
  }
  const path = args.path ?? "release-notes.md";
  // A bounded retry around the draft-and-write step. A denial (fs.write not allowed) is final
  // and is not retried.
  const written = await g.retry(
    async (attempt) => {
      const draft = await g.agent({ label: "draft", prompt: `Write markdown release notes (attempt ${attempt}) for: ${args.changes}` });
      if (!draft.text.startsWith("# ")) {
        throw new Error(`draft ${attempt} has no heading`);
      }
      const out = await g.tool("fs.write", { path, text: draft.text });
      return { attempt, bytes: out.bytes };
    },
    { attempts: 3, delayMs: 20 },
  );
  return { path, attempts: written.attempt, bytes: written.bytes };
}
