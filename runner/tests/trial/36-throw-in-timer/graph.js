export const meta = {name: 'throw-in-timer', slug: 'throw-in-timer', version: '1'};
export default async function (args, g) {
  setTimeout(() => { throw new Error("timer broke"); }, 10);
  await g.sleep(50);
  return "done";
}
