export const meta = {name: 'retry-delay-key', slug: 'retry-delay-key', version: '1'};
export default async function (args, g) {
  let n = 0;
  return await g.retry(async () => { n += 1; if (n < 2) throw new Error("flaky"); return n; }, {attempts: 3, delay: 100});
}
