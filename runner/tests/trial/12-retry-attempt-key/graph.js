export const meta = {name: 'retry-attempt-key', slug: 'retry-attempt-key', version: '1'};
export default async function (args, g) {
  let n = 0;
  return await g.retry(async () => { n += 1; if (n < 5) throw new Error("flaky"); return n; }, {attempt: 5});
}
